"""A screened partition costs the exporter a few bytes between polls, so every partition of a
large cluster can be screened (at 1M partitions the per-partition state was the limit:
benchmarks/RESULTS.md). Measured with tracemalloc: what the screening modules allocated and
still hold once every partition is screened and the polls have settled."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_sim.cluster import SimCluster
from simhelpers import CAPTURE_BROKER_CONFIG, PollEnv, poll_env

from exporter.collect import producers, screened, screening

PARTITIONS = 3000
BYTES_PER_PARTITION = 48
"""The arrays hold 20 bytes per screened partition (its index, HW, held fetch offset and
state count); the rest is each array's own growth and the leaders' dicts."""


@pytest.fixture
def env() -> Iterator[PollEnv]:
    with (
        SimCluster(brokers=3, topics={"t": PARTITIONS // 2, "u": PARTITIONS // 2},
                   broker_config=CAPTURE_BROKER_CONFIG) as sim,
        poll_env(sim, "screening-memory", request_timeout_seconds=10.0) as env,
    ):
        yield env


def _held_by(*modules: object) -> int:
    gc.collect()
    files = [str(Path(m.__file__).resolve()) for m in modules]  # type: ignore[attr-defined]
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, f) for f in files])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_every_partition_is_screened_in_a_few_bytes_each(env: PollEnv) -> None:
    reader = env.poller.poller._producers
    tracemalloc.start()
    try:
        for _ in range(4):  # joined, read with ListOffsets, into the session, settled
            observation = env.poller.poll()
            assert observation.unobserved == {} and observation.request_errors == ()
        del observation
        assert reader.screened_partitions() == PARTITIONS
        held = _held_by(screened, screening, producers)
    finally:
        tracemalloc.stop()
    assert held < BYTES_PER_PARTITION * PARTITIONS, held / PARTITIONS
