"""Differential test of the screened poll: the full poll (DescribeProducers for
every partition, every poll) and the screened one (every answered partition screened through fetch
sessions, asked DescribeProducers only where LSO < HW and moved since last asked) poll the
same cluster at the same instants through 30 simulated minutes of churn (commits, aborts,
abandoned producers, fenced ids, moving leaders and coordinators, markers held back, a
hanging transaction injected, producer states expiring), and every snapshot must be equal:
open transactions, late/hanging/orphaned counts, partitions with open transactions, LSO lag,
unobserved partitions.

Between the two polls of an instant the cluster stands still: the workload thread runs its
steps under a lock the test holds, and the simulator's periodic work (marker retries, the
timeout sweep, producer expiration) is given a tick to settle before the pair is taken."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka_sim.clock import ManualClock
from kafka_sim.cluster import TICK_INTERVAL_SECONDS, SimCluster
from kafka_sim.producer import hanging_transaction
from kafka_sim.seed import seed_producer_states, skewed_state_counts
from simhelpers import CAPTURE_BROKER_CONFIG, cluster_settings
from test_orphaned_churn import PARTITIONS, POLL_INTERVAL_MS, TOPIC, Churn

from exporter.analyze import analyze
from exporter.model import ClusterObservation, ClusterSnapshot
from exporter.observe import ClusterObserver

POLLS = 60
EXPIRATION_MS = 600_000  # producer.id.expiration.ms: seeded states expire during the run
COLD_TOPIC = "quiet"


class PausableChurn(Churn):
    """The churn workload, one step at a time under `lock`."""

    lock: threading.Lock

    def step(self) -> None:
        with self.lock:
            super().step()


def fingerprint(obs: ClusterObservation, snap: ClusterSnapshot) -> dict[str, Any]:
    """Everything of a poll's result that must not depend on the strategy."""
    return {
        "open": sorted(t.key for t in obs.open_transactions),
        "brokers": [
            (b.broker_id, b.up, b.partitions_with_open_transactions,
             b.partitions_with_late_transactions, b.partitions_with_hanging_transactions,
             b.partitions_with_orphaned_transactions)
            for b in snap.brokers
        ],
        "late": sorted(t.transaction.key for t in snap.late_transactions),
        "orphaned": sorted(o.transaction.key for o in snap.orphaned_transactions),
        "max_duration": dict(snap.max_active_transaction_duration_seconds),
        "lso_lag": dict(snap.last_stable_offset_lag),
        "unobserved": snap.unobserved_partitions,
        "unobserved_by_reason": dict(snap.unobserved_by_reason),
        "warm": snap.orphan_detection_warm,
        "states": snap.transaction_states,
    }


@contextmanager
def two_pollers(sim: SimCluster) -> Iterator[tuple[ClusterObserver, ClusterObserver, Any]]:
    settings = cluster_settings(sim, "diff", request_timeout_seconds=5.0)
    full = ClusterObserver(settings, clock_ms=sim.clock.now_ms, screen_partitions=False)
    screened = ClusterObserver(settings, clock_ms=sim.clock.now_ms)
    try:
        yield full, screened, settings
    finally:
        full.close()
        screened.close()


def test_screened_poll_equals_full_poll_through_churn() -> None:
    rng = random.Random(2028)
    config = {**CAPTURE_BROKER_CONFIG, "producer.id.expiration.ms": str(EXPIRATION_MS)}
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    screened_seen: list[int] = []
    faults: Counter[str] = Counter()
    with SimCluster(brokers=3, topics={TOPIC: PARTITIONS, COLD_TOPIC: PARTITIONS},
                    broker_config=config) as sim:
        # Time moves only when the test moves it: both polls of a pair see the same instant.
        sim.call(setattr, sim.state, "clock", ManualClock(sim.clock.now_ms()))
        with two_pollers(sim) as (full, screened, settings):
            run(sim, rng, full, screened, settings, pairs, screened_seen, faults)

    for i, (want, got) in enumerate(pairs):
        assert got == want, f"poll {i}"
    # Not vacuous: partitions were screened, transactions and an orphan were seen.
    assert max(screened_seen) >= PARTITIONS, screened_seen
    assert any(w["open"] for w, _ in pairs)
    assert any(w["orphaned"] for w, _ in pairs)
    assert sum(1 for w, _ in pairs if w["open"]) >= POLLS // 3
    assert len(faults) == 3, faults


def run(sim: SimCluster, rng: random.Random, full: ClusterObserver, screened: ClusterObserver,
        settings: Any, pairs: list[tuple[dict[str, Any], dict[str, Any]]],
        screened_seen: list[int], faults: Counter[str]) -> None:
    now = sim.clock.now_ms()
    layout = [(t, p) for t in (TOPIC, COLD_TOPIC) for p in range(PARTITIONS)]
    for (topic, p), n in skewed_state_counts(layout, 20, hot_fraction=0.5,
                                             rng=rng).items():
        sim.call(seed_producer_states, sim.state, topic, p, n, now_ms=now,
                 max_age_ms=EXPIRATION_MS, rng=rng)
    lock = threading.Lock()
    churn = PausableChurn(sim.bootstrap_servers, sim.clock.now_ms, lambda: len(pairs))
    churn.lock = lock
    worker = threading.Thread(target=churn.run, name="churn", daemon=True)
    worker.start()
    blocked: set[int] = set()
    try:
        for poll in range(POLLS):
            time.sleep(0.05)  # the workload runs between instants
            with lock:
                sim.clock.advance(POLL_INTERVAL_MS)
                roll = rng.random()
                broker = rng.choice(sim.node_ids)
                if roll < 0.25:
                    sim.move_partition_leader(TOPIC, rng.randrange(PARTITIONS), broker)
                    faults["leader moved"] += 1
                elif roll < 0.45:
                    sim.move_transaction_coordinator(
                        f"churn-{rng.randrange(32)}", broker)
                    faults["coordinator moved"] += 1
                elif roll < 0.6 and not blocked:
                    sim.block_markers(broker, True)
                    blocked.add(broker)
                    faults["markers held back"] += 1
                elif blocked and roll > 0.8:
                    for b in blocked:
                        sim.block_markers(b, False)
                    blocked.clear()
                if poll == POLLS // 2:
                    hanging_transaction(sim.bootstrap_servers, "injected-hang", TOPIC, 0,
                                        now_ms=sim.clock.now_ms)
                time.sleep(3 * TICK_INTERVAL_SECONDS)  # marker retries, sweeps settle
                a = full.poll()
                b = screened.poll()
            pairs.append((fingerprint(a, analyze(a, settings)),
                          fingerprint(b, analyze(b, settings))))
            screened_seen.append(screened.poller._producers.screened_partitions())
    finally:
        churn.stop.set()
        worker.join(30)
        for b_id in blocked:
            sim.block_markers(b_id, False)
    assert churn.stats["short committed"] >= 20, churn.stats
