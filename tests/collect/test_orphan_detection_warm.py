"""`orphan_detection_warm` (issue 27): a poll says whether its orphaned verdicts are complete.

An orphaned transaction needs two consecutive "not tracked" answers, asked only about
transactions a previous poll saw open: after a start it is reported from the third poll, after
a failed poll (no Metadata) from the second. Until then it is missing although still open; the
alert rules hold its page while no replica is warm, so the flag must be false exactly then.
Against the simulator over TCP, polls one interval apart on its clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from simhelpers import CAPTURE_BROKER_CONFIG, PollEnv, poll_env

from exporter.model import ClusterSnapshot

POLL_INTERVAL_MS = 30_000


@pytest.fixture
def env() -> Iterator[PollEnv]:
    with (
        SimCluster(brokers=1, topics={"t": 2}, broker_config=CAPTURE_BROKER_CONFIG) as sim,
        poll_env(sim, "sim", request_timeout_seconds=2.0, min_reported_duration_seconds=0.0)
        as env,
    ):
        yield env


def next_poll(env: PollEnv) -> ClusterSnapshot:
    env.sim.clock.advance(POLL_INTERVAL_MS)
    return env.poll()[1]


def test_warm_exactly_when_an_orphan_open_all_along_is_reported(env: PollEnv) -> None:
    hanging_transaction(env.bootstrap, "hang-warm", "t", 0, now_ms=env.now_ms)
    seen = [next_poll(env) for _ in range(4)]
    assert [s.orphan_detection_warm for s in seen] == [False, False, True, True]
    assert [len(s.orphaned_transactions) for s in seen] == [0, 0, 1, 1]

    # Every broker gone: the poll fails (no Metadata). No answer is no evidence (issue 30): the
    # consecutive answers stand, so the first poll after it is warm and reports the orphan.
    for node in env.sim.node_ids:
        env.sim.stop_broker(node)
    failed = next_poll(env)
    assert not failed.up and not failed.orphan_detection_warm
    for node in env.sim.node_ids:
        env.sim.start_broker(node)
    after = [next_poll(env) for _ in range(3)]
    assert [s.up for s in after] == [True, True, True]
    assert [s.orphan_detection_warm for s in after] == [True, True, True]
    assert [len(s.orphaned_transactions) for s in after] == [1, 1, 1]
