"""Churn: 30 minutes of simulated time of healthy transactions -- commits,
aborts, producers that vanish and are timed out by their coordinator, transactional ids re-used
by a new producer (InitProducerId bumps the epoch and fences what the old one left open),
partition leaders and transaction coordinators that move, coordinators loading, markers held
back by a leader -- give **zero** orphaned reports, while a hanging transaction injected in the
same run is flagged.

Simulated time: the poller and the producers read the simulator's clock, which the test moves
forward by one poll interval (30 s, the default) before each of 60 polls, so 30 simulated
minutes pass in seconds. The healthy workload runs on its own thread in real time, concurrently
with the polls, so transactions also begin and end while a poll is under way (the races of
docs/kafka-semantics.md#orphaned).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kafka_sim.cluster import SimCluster
from kafka_sim.producer import (
    OpenTransaction,
    aborted_transaction,
    committed_transaction,
    hanging_transaction,
    open_transaction,
)
from simhelpers import CAPTURE_BROKER_CONFIG, poll_env
from waits import wait_for

from exporter.model import ClusterSnapshot

POLL_INTERVAL_MS = 30_000
POLLS = 60  # 30 simulated minutes
PARTITIONS = 6
TOPIC = "churn"
TRANSACTIONAL_IDS = 32  # re-used: each new producer of an id bumps its epoch
STEPS_BETWEEN_POLLS = 3


@dataclass
class Churn:
    """Healthy transactions on a thread: short ones (commit or abort at once) and long ones
    that stay open for a few polls, then commit, abort, or are abandoned (the producer goes
    away without EndTxn: the coordinator aborts it when its timeout passes)."""

    bootstrap: str
    now_ms: Any
    polls_done: Any
    rng: random.Random = field(default_factory=lambda: random.Random(17))
    stats: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)
    _open: list[tuple[int, str, OpenTransaction]] = field(default_factory=list)
    _n: int = 0
    steps: int = 0
    """Steps finished (with or without an error): the test waits on it between polls."""

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except Exception as exc:  # fenced, timed out under us, coordinator moved ...
                self.stats[f"error {type(exc).__name__}"] += 1
            self.steps += 1
            time.sleep(0.002)
        for _, _, txn in self._open:
            txn.close_quietly()

    def step(self) -> None:
        polls = self.polls_done()
        for item in [i for i in self._open if i[0] <= polls]:
            self._open.remove(item)
            _, ending, txn = item
            # Churn does not wait for markers (they may be held back): it only ends them.
            if ending == "commit":
                txn.commit(wait_for_markers=False)
            elif ending == "abort":
                txn.abort(wait_for_markers=False)
            else:
                txn.abandon()  # the coordinator times it out
            self.stats[f"long {ending}"] += 1
        self._n += 1
        tid = f"churn-{self.rng.randrange(TRANSACTIONAL_IDS)}"
        if any(txn.transactional_id == tid for _, _, txn in self._open):
            self.stats["fenced by a new producer"] += 1  # its InitProducerId aborts that one
        partitions = self.rng.sample(range(PARTITIONS), self.rng.choice((1, 1, 2, 3)))
        roll = self.rng.random()
        # A short timeout: a producer fenced behind held-back markers gives up soon.
        options: dict[str, Any] = {"now_ms": self.now_ms, "transaction_timeout_ms": 60_000,
                                   "timeout_s": 1.0}
        if roll < 0.15 and len(self._open) < 12:
            txn = open_transaction(self.bootstrap, tid, TOPIC, partitions, **options)
            ending = self.rng.choice(("commit", "commit", "abort", "abandon"))
            self._open.append((polls + self.rng.randint(1, 4), ending, txn))
            self.stats["long started"] += 1
        elif roll < 0.45:
            aborted_transaction(self.bootstrap, tid, TOPIC, partitions, **options,
                                wait_for_markers=False)
            self.stats["short aborted"] += 1
        else:
            committed_transaction(self.bootstrap, tid, TOPIC, partitions, **options,
                                  wait_for_markers=False)
            self.stats["short committed"] += 1


def test_thirty_minutes_of_churn_report_no_healthy_transaction_orphaned() -> None:
    rng = random.Random(1917)
    snapshots: list[ClusterSnapshot] = []
    asked = 0
    faults: Counter[str] = Counter()
    with (
        SimCluster(brokers=3, topics={TOPIC: PARTITIONS}, broker_config=CAPTURE_BROKER_CONFIG)
        as sim,
        poll_env(sim, "churn", request_timeout_seconds=5.0) as env,
    ):
        churn = Churn(env.bootstrap, env.now_ms, lambda: len(snapshots))
        worker = threading.Thread(target=churn.run, name="churn", daemon=True)
        worker.start()
        blocked: set[int] = set()
        loading: set[int] = set()
        coordinator: Any = sim.state.coordinator
        hang_key = None
        try:
            for poll in range(POLLS):
                sim.clock.advance(POLL_INTERVAL_MS)
                for p in loading:  # a coordinator loads for one poll
                    sim.call(coordinator.loading_partitions.discard, p)
                loading.clear()
                some_id = f"churn-{rng.randrange(TRANSACTIONAL_IDS)}"
                # Coordinators stay put and answer while the control is checked, so that its
                # timing is exact (an unanswered poll restarts the count, as
                # tests/collect/test_orphaned_sim.py shows).
                movable = not POLLS // 2 <= poll <= POLLS // 2 + 2
                if rng.random() < 0.15 and movable:
                    p = sim.call(coordinator.partition_for, some_id)
                    sim.call(coordinator.loading_partitions.add, p)
                    loading.add(p)
                    faults["coordinator loading"] += 1
                roll = rng.random()
                broker = rng.choice(sim.node_ids)
                if roll < 0.25:
                    sim.move_partition_leader(TOPIC, rng.randrange(PARTITIONS), broker)
                    faults["leader moved"] += 1
                elif roll < 0.45 and movable:
                    sim.move_transaction_coordinator(some_id, broker)
                    faults["coordinator moved"] += 1
                elif roll < 0.6 and not blocked:
                    sim.block_markers(broker, True)  # markers to its partitions wait
                    blocked.add(broker)
                    faults["markers held back"] += 1
                elif blocked and roll > 0.8:
                    for b in blocked:
                        sim.block_markers(b, False)
                    blocked.clear()
                if poll == POLLS // 2:  # the positive control, in the same run
                    pid, epoch, offset = hanging_transaction(
                        env.bootstrap, "injected-hang", TOPIC, 0, now_ms=env.now_ms)
                    hang_key = (TOPIC, 0, pid, epoch, offset)
                # The workload also runs between polls: at least STEPS_BETWEEN_POLLS steps of
                # it, however busy the machine (it keeps running during the poll too).
                target = churn.steps + STEPS_BETWEEN_POLLS
                wait_for("the churn's steps between polls", lambda t=target: churn.steps >= t)
                obs, snap = env.poll()
                asked += len(obs.descriptions)
                snapshots.append(snap)
        finally:
            churn.stop.set()
            worker.join(30)
            for b in blocked:
                sim.block_markers(b, False)
            for p in loading:
                sim.call(coordinator.loading_partitions.discard, p)

    flagged = {o.transaction.key for s in snapshots for o in s.orphaned_transactions}
    assert flagged == {hang_key}, churn.stats  # zero healthy transactions reported
    first_flagged = next(i for i, s in enumerate(snapshots) if s.orphaned_transactions)
    assert first_flagged == POLLS // 2 + 2  # seen at the injection poll, flagged 2 polls later
    for s in snapshots[:first_flagged]:
        assert all(b.partitions_with_orphaned_transactions in (0, None) for b in s.brokers)
    # The run really exercised what it claims (not a vacuous zero): at least
    # POLLS x STEPS_BETWEEN_POLLS steps ran, whatever the machine's load.
    stats = churn.stats
    assert stats["short committed"] >= 50 and stats["short aborted"] >= 25, stats
    assert stats["long commit"] + stats["long abort"] >= 2, stats  # ended by their producer
    assert stats["long abandon"] >= 1, stats  # left to the coordinator's timeout
    assert asked > 20  # transactions open across polls were described
    assert churn.stats["fenced by a new producer"] >= 1  # an id re-used while open
    assert min(faults.values()) >= 3 and len(faults) == 4, faults
