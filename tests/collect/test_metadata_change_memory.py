"""A changed Metadata answer is parsed after the previous parse has been let go: the
client's cached parse and the DescribeProducers batches built on its `by_leader`
are dropped first, so the two views are never alive at once (at 1M partitions that was
~100 MiB more at the peak of the poll after a leader moved: benchmarks/RESULTS.md).

Measured with tracemalloc: what the parse function allocated and is still alive, when the
next parse starts."""

from __future__ import annotations

import gc
import inspect
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from simhelpers import CAPTURE_BROKER_CONFIG, PollEnv, poll_env

from exporter.collect.apis import metadata as metadata_api
from exporter.model import TopicPartition

PARTITIONS = 3000
_FRAMES = 2  # the parse's own line, or the constructor it called


def _parse_lines() -> tuple[str, range]:
    lines, first = inspect.getsourcelines(metadata_api._parse_lean_metadata)
    return inspect.getsourcefile(metadata_api._parse_lean_metadata) or "", range(
        first, first + len(lines))


def _alive_from_parse() -> int:
    """Bytes allocated by the lean Metadata parse, or by what it called (a record's
    constructor), that are still alive (after a collection)."""
    gc.collect()
    filename, lines = _parse_lines()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, filename, all_frames=True)])
    return sum(
        trace.size for trace in snapshot.traces
        if any(frame.filename == filename and frame.lineno in lines
               for frame in trace.traceback))


@pytest.fixture
def env() -> Iterator[PollEnv]:
    with (
        SimCluster(brokers=3, topics={"t": PARTITIONS},
                   broker_config=CAPTURE_BROKER_CONFIG) as sim,
        # Metadata every poll: the poll right after the move parses the changed answer (with
        # the default age the moved partition's error would first ask it again).
        poll_env(sim, "metadata-memory", request_timeout_seconds=10.0,
                 metadata_max_age_seconds=0.0) as env,
    ):
        yield env


def test_the_previous_parse_is_gone_when_a_changed_metadata_answer_is_parsed(
    env: PollEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracemalloc.start(_FRAMES)
    try:
        env.poller.poll()
        env.poller.poll()  # unchanged answer: the parse is reused
        one_parse = _alive_from_parse()
        assert one_parse > 100 * PARTITIONS  # keys, leaders, by_leader lists of every partition

        alive_at_next_parse: list[int] = []
        real_parse = metadata_api.parse_metadata

        def parse(response: Any) -> Any:
            alive_at_next_parse.append(_alive_from_parse())
            return real_parse(response)

        monkeypatch.setattr(metadata_api, "parse_metadata", parse)
        state: Any = env.sim.state
        leader = state.partition("t", 0).leader_id
        moved_to = 1 if leader != 1 else 2
        env.sim.move_partition_leader("t", 0, moved_to)
        observation = env.poller.poll()
        assert observation.leaders[TopicPartition("t", 0)] == moved_to
        assert observation.request_errors == () and observation.unobserved == {}
        assert len(alive_at_next_parse) == 1  # the full answer (nothing re-routed)
        # Before: the whole previous parse (client cache) or its by_leader lists (batches).
        assert alive_at_next_parse[0] < one_parse // 50, (alive_at_next_parse, one_parse)
        del observation
        # The new parse is kept and reused again while the answer stays the same.
        monkeypatch.setattr(metadata_api, "parse_metadata", real_parse)
        env.poller.poll()
        assert abs(_alive_from_parse() - one_parse) < one_parse // 10
    finally:
        tracemalloc.stop()
