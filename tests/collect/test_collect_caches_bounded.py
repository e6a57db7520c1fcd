"""Soak: hundreds of transactional ids come and go through one long-lived
poller against the simulator, and every cache the poller keeps between polls stays bounded by
what is open now; once everything has ended, the per-transaction caches are empty.

The transactions are made late at once (a 1 ms transaction.max.timeout.ms override and no
buffer) so that each poll maps their producers to transactional ids and looks up their
coordinators: the path whose cache used to keep every id it had ever seen.
"""

from __future__ import annotations

from kafka_sim.cluster import SimCluster
from kafka_sim.producer import open_transaction
from simhelpers import CAPTURE_BROKER_CONFIG, poll_env

from exporter.model import Classification

ROUNDS = 25
IDS_PER_ROUND = 8
PER_TRANSACTION_CACHES = (
    "batch_timestamps", "first_seen", "coordinators", "described_states", "seen_open",
    "untracked_polls",
)


def test_caches_stay_bounded_over_hundreds_of_transactional_ids() -> None:
    with (
        SimCluster(brokers=3, topics={"t": 4}, broker_config=CAPTURE_BROKER_CONFIG) as sim,
        poll_env(sim, "soak", request_timeout_seconds=5.0, transaction_max_timeout_ms=1,
                 late_buffer_seconds=0.0, min_reported_duration_seconds=0.0) as env,
    ):
        peak: dict[str, int] = {}
        described: set[str] = set()
        for round_ in range(ROUNDS):
            txns = [
                open_transaction(env.bootstrap, f"soak-{round_}-{i}", "t", [i % 4],
                                 now_ms=env.now_ms)
                for i in range(IDS_PER_ROUND)
            ]
            env.sim.clock.advance(1000)
            obs, snap = env.poll()
            assert len(snap.late_transactions) == IDS_PER_ROUND
            assert all(late.classification is Classification.COORDINATOR_TRACKED
                       for late in snap.late_transactions)
            described.update(obs.descriptions)
            sizes = env.poller.cache_sizes()
            for name, size in sizes.items():
                peak[name] = max(peak.get(name, 0), size)
            for txn in txns:
                txn.commit()
        _, snap = env.poll()
        assert snap.late_transactions == ()
        final = env.poller.cache_sizes()

    assert len(described) == ROUNDS * IDS_PER_ROUND  # 200 ids came and went
    for name in PER_TRANSACTION_CACHES:
        assert peak[name] <= IDS_PER_ROUND, (name, peak)
        assert final[name] == 0, (name, final)
    # The others are per broker, not per transaction.
    assert final["max_timeouts"] == 0  # the override skips DescribeConfigs
    assert final["down_logged"] == 0 and final["unsupported_logged"] == 0
