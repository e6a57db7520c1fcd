"""Faults on a real 3-broker KRaft cluster while a late hanging transaction is open:
kill -9 of the transactional id's coordinator and of the partition's leader, each
inside a poll, a leader move (a preferred LeaderElectionCommand gives the partition back to
the killed leader once it is in sync again) and a clean broker restart, with the exporter
polling every second in a thread and each poll rendered as /metrics.

Every poll is held to the house rule (never a false number): the late/hanging counts per broker
are the truth or absent with the reason counted, never 0 for the partition's leader while the
transaction is open, and the cluster never reads "no late transaction" while a partition is
unobserved. After each broker is back, the polls until full recovery (late=1 and hanging=1 on
the leader, every broker up, nothing unobserved) are counted and bounded (README, Resilience;
Kafka's behaviour under these faults: docs/kafka-semantics.md#faults).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kafka_sim.producer import hanging_transaction
from kafka_sim.realkafka import RealKafkaCluster, start_cluster
from kafka_sim.routing import RawCluster
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from realhelpers import (
    LATE_BACKDATE_MS,
    VERIFICATION_OFF,
    cluster_settings,
    create_topic,
    unique,
)

from exporter.analyze import analyze
from exporter.collect.poll import wall_clock_ms
from exporter.expose.collector import SnapshotCollector
from exporter.model import Classification, ClusterObservation, ClusterSnapshot, TopicPartition
from exporter.observe import ClusterObserver
from exporter.snapshots import SnapshotStore

FAULT_BROKER_CONFIG = {
    **VERIFICATION_OFF,
    # A killed broker is fenced (its partitions get a new leader) after 4 s, not the default
    # 9 s: the faults fit the time budget, and still far above a heartbeat's 0.5 s.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
}
POLL_INTERVAL_SECONDS = 1.0
RECOVERY_POLLS_BOUND = 5
"""Polls, after a broker is back (restart returned: it logged it started and accepts
connections) or a leader move is done, until the exporter shows the full picture again
(measured 1 or 2: see the README's Resilience notes)."""
FAILOVER_DEADLINE_SECONDS = 45.0
"""Until the new leader of a killed one is seen: Kafka's fencing (broker.session.timeout.ms)
and election, not the exporter, set it (measured 5 to 10 polls)."""
ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"


@dataclass
class Sample:
    """One poll: when it started, during which fault, and what the exporter made of it (the
    snapshot, and /metrics as a scrape right after the poll read it)."""

    index: int
    started: float
    phase: str
    observation: ClusterObservation
    snapshot: ClusterSnapshot
    scrape: dict[str, dict[str, float]]
    """Per-broker families: metric name -> {broker label: value}; plus the cluster-wide
    gauges under the key "" ({"": value})."""


@dataclass
class Truth:
    """The one open transaction: a late hanging one on `tp`, nothing else open anywhere."""

    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    start_offset: int
    transactional_id: str


@dataclass
class PollLoop:
    """The exporter's poller every second in a thread, every poll kept. `kill_mid_poll` arms
    a kill that runs inside the next poll, after it started (its clock is read after the
    poller began the poll and before it sends Metadata or DescribeProducers)."""

    cluster: RealKafkaCluster
    phase: str = "setup"
    samples: list[Sample] = field(default_factory=list)
    failure: BaseException | None = None
    _armed: Callable[[], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _new_sample: threading.Condition = field(default_factory=threading.Condition)

    def _clock_ms(self) -> int:
        armed, self._armed = self._armed, None
        if armed is not None:
            armed()
        return wall_clock_ms()

    def kill_mid_poll(self, node_id: int) -> None:
        """SIGKILL `node_id` inside the next poll; returns once it is dead."""
        done = threading.Event()

        def kill() -> None:
            self.cluster.kill(node_id, signal.SIGKILL)
            done.set()

        self._armed = kill
        assert done.wait(30), "no poll ran the armed kill"

    def run(self) -> None:
        settings = cluster_settings(self.cluster)
        poller = ClusterObserver(settings, clock_ms=self._clock_ms)
        store = SnapshotStore([settings])
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(store))
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                observation = poller.poll()
                snapshot = analyze(observation, settings)
                store.publish(snapshot)
                scrape = read_scrape(generate_latest(registry).decode())
                with self._new_sample:
                    self.samples.append(
                        Sample(
                            len(self.samples), started, self.phase, observation, snapshot, scrape
                        )
                    )
                    self._new_sample.notify_all()
                self._stop.wait(max(0.0, started + POLL_INTERVAL_SECONDS - time.monotonic()))
        except BaseException as exc:  # surfaced by the test, not lost in the thread
            self.failure = exc
        finally:
            poller.close()

    def stop(self) -> None:
        self._stop.set()

    def wait_for(
        self, predicate: Callable[[Sample], bool], after: float, timeout: float, what: str
    ) -> Sample:
        """The first poll started after `after` (monotonic) that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        with self._new_sample:
            while True:
                for sample in self.samples:
                    if sample.started >= after and predicate(sample):
                        return sample
                assert self.failure is None, f"poll loop failed: {self.failure!r}"
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    last = self.samples[-1] if self.samples else None
                    raise AssertionError(f"{what}: not within {timeout} s; last poll: {last}")
                self._new_sample.wait(remaining)

    def polls_between(self, after: float, sample: Sample) -> int:
        """Polls started after `after` up to and including `sample`."""
        return sum(1 for s in self.samples[: sample.index + 1] if s.started >= after)


SCRAPED_PER_BROKER = (
    "kafka_partitions_with_late_transactions",
    "kafka_partitions_with_hanging_transactions",
    "kafka_txn_exporter_broker_up",
)
SCRAPED_PER_CLUSTER = (
    "kafka_cluster_max_active_transaction_duration_seconds",
    "kafka_txn_exporter_unobserved_partitions",
)


def read_scrape(text: str) -> dict[str, dict[str, float]]:
    """The families the checks read from a /metrics text: {name: {broker or "": value}}."""
    wanted = {*SCRAPED_PER_BROKER, *SCRAPED_PER_CLUSTER}
    found: dict[str, dict[str, float]] = {name: {} for name in wanted}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                found[sample.name][sample.labels.get("broker", "")] = sample.value
    return found


# -- the truth, from the cluster ---------------------------------------------------------------
def partition_state(
    cluster: RealKafkaCluster, tp: TopicPartition
) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of `tp` from Metadata of any broker that answers."""
    raw = RawCluster(cluster.bootstrap, "faults-test", timeout_s=10)
    try:
        response = raw.refresh_metadata([tp.topic])
    finally:
        raw.close()
    for topic in response.topics:
        for part in topic.partitions:
            if topic.name == tp.topic and part.partition_index == tp.partition:
                return part.leader_id, list(part.replica_nodes), list(part.isr_nodes)
    raise AssertionError(f"{tp} not in Metadata")


def transaction_coordinator(cluster: RealKafkaCluster, transactional_id: str) -> int:
    """The node FindCoordinator names for `transactional_id`."""
    raw = RawCluster(cluster.bootstrap, "faults-test", timeout_s=10)
    try:
        client = raw.coordinator_client(transactional_id)
        port = client.port
    finally:
        raw.close()
    (node,) = [n for n in cluster.node_ids if cluster.port(n) == port]
    return node


# -- what the exporter may say -----------------------------------------------------------------
def check_no_false_number(sample: Sample, truth: Truth) -> None:
    """The house rule for one poll, whatever the fault: every number shown is true."""
    obs, snap = sample.observation, sample.snapshot
    where = f"poll {sample.index} ({sample.phase})"
    late = [lt for lt in snap.late_transactions if lt.transaction.topic == truth.tp.topic]
    assert len(snap.late_transactions) == len(late), f"{where}: a late transaction elsewhere"
    if not obs.brokers:  # Metadata failed: nothing is shown at all
        assert not late and not snap.brokers and snap.request_errors, where
        return
    if truth.tp in obs.unobserved:
        assert not late, where
        assert snap.unobserved_by_reason, f"{where}: unobserved without a reason counted"
    else:
        # Observed: it must be seen, as what it is (never a false "no late transaction").
        assert len(late) == 1, f"{where}: {truth.tp} observed but late = {late}"
        (found,) = late
        txn = found.transaction
        assert (txn.partition, txn.producer_id, txn.producer_epoch) == (
            truth.tp.partition, truth.producer_id, truth.producer_epoch,
        ), where  # fmt: skip
        assert txn.current_txn_start_offset == truth.start_offset, where
        assert found.classification in (Classification.HANGING, Classification.UNKNOWN), (
            f"{where}: {found.classification}"
        )
        if found.classification is Classification.UNKNOWN:
            assert not obs.coordinator_view_complete or truth.transactional_id not in (
                obs.descriptions
            ), f"{where}: unknown with the coordinator's answer at hand"
    if not late:
        # The cluster-wide picture never says "no late transaction" (nor a 0 s oldest one).
        assert snap.unobserved_partitions > 0, f"{where}: no late transaction, all observed"
        assert snap.cluster_max_active_transaction_duration_seconds is None, where
    leader = late[0].transaction.leader_id if late else obs.leaders.get(truth.tp, -1)
    for broker in snap.brokers:
        expected = 1 if late and broker.broker_id == leader else 0
        for name, count in (
            ("late", broker.partitions_with_late_transactions),
            ("hanging", broker.partitions_with_hanging_transactions),
            ("open", broker.partitions_with_open_transactions),
        ):
            assert count in (None, expected), (
                f"{where}: broker {broker.broker_id} {name}={count}, truth {expected} "
                f"(leader {leader}, late {late})"
            )
        if broker.broker_id == leader and not late:
            assert broker.partitions_with_late_transactions is None, where
        if not broker.up:
            assert broker.partitions_with_late_transactions is None, where
        if broker.partitions_with_late_transactions is None or (
            broker.partitions_with_hanging_transactions is None
        ):
            # Absent, with the reason counted: the broker down, partitions unobserved (per
            # reason), or a failed request (a coordinator's, for an unknown verdict).
            assert not broker.up or snap.unobserved_by_reason or snap.request_errors, (
                f"{where}: broker {broker.broker_id}'s counts absent without a reason"
            )
    # The scrape shows exactly the snapshot's numbers: an unknown count is an absent series.
    scrape = sample.scrape
    for broker in snap.brokers:
        b = str(broker.broker_id)
        assert scrape["kafka_txn_exporter_broker_up"].get(b) == float(broker.up), where
        for name, count in (
            ("kafka_partitions_with_late_transactions", broker.partitions_with_late_transactions),
            (
                "kafka_partitions_with_hanging_transactions",
                broker.partitions_with_hanging_transactions,
            ),
        ):
            shown = scrape[name].get(b)
            assert shown == (None if count is None else float(count)), (
                f"{where}: {name}{{broker={b}}} scraped {shown}, snapshot {count}"
            )
    if not late:
        assert scrape["kafka_cluster_max_active_transaction_duration_seconds"] == {}, where
        assert scrape["kafka_txn_exporter_unobserved_partitions"].get("", 0) > 0, where
    if late and late[0].classification is Classification.UNKNOWN:
        (summary,) = [b for b in snap.brokers if b.broker_id == leader]
        assert summary.partitions_with_hanging_transactions is None, where


def fully_recovered(
    truth: Truth, leader: int | None = None, up: int = 3
) -> Callable[[Sample], bool]:
    """late=1 and hanging=1 on the leader (`leader` when given), 0 on the others, `up`
    brokers up, nothing unobserved."""

    def check(sample: Sample) -> bool:
        snap = sample.snapshot
        if snap.unobserved_partitions or sum(b.up for b in snap.brokers) != up:
            return False
        if len(snap.late_transactions) != 1:
            return False
        found = snap.late_transactions[0]
        if found.classification is not Classification.HANGING:
            return False
        on = found.transaction.leader_id
        if leader is not None and on != leader:
            return False
        return all(
            (b.partitions_with_late_transactions, b.partitions_with_hanging_transactions)
            == ((1, 1) if b.broker_id == on else (0, 0))
            for b in snap.brokers
            if b.up
        )

    return check


def late_on(sample: Sample, broker_id: int) -> tuple[int | None, int | None]:
    """(late, hanging) counts the poll showed for one broker."""
    (broker,) = [b for b in sample.snapshot.brokers if b.broker_id == broker_id]
    return broker.partitions_with_late_transactions, broker.partitions_with_hanging_transactions


def summarize(samples: list[Sample]) -> list[str]:
    """One line per poll: what the exporter showed (for the report when a check fails)."""
    lines = []
    for s in samples:
        snap = s.snapshot
        late = [
            (lt.transaction.leader_id, lt.classification.value) for lt in snap.late_transactions
        ]
        brokers = " ".join(
            f"{b.broker_id}:{'up' if b.up else 'DOWN'}"
            f"/{b.partitions_with_late_transactions}/{b.partitions_with_hanging_transactions}"
            for b in snap.brokers
        )
        errors = sorted({f"{e.broker_id}:{e.api}:{e.error}" for e in snap.request_errors})
        lines.append(
            f"#{s.index} {s.phase} late={late} brokers[id:up/late/hanging]={brokers} "
            f"unobserved={dict(snap.unobserved_by_reason)} errors={errors}"
        )
    return lines


# -- the cluster --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def three_brokers(
    kafka_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealKafkaCluster]:
    workdir = tmp_path_factory.mktemp(f"kafka-faults-{kafka_version}")
    cluster = start_cluster(kafka_version, workdir, nodes=3, broker_config=FAULT_BROKER_CONFIG)
    try:
        yield cluster
    finally:
        cluster.stop()


def elect_preferred_leader(cluster: RealKafkaCluster, tp: TopicPartition) -> int:
    """Move `tp`'s leadership back to its preferred replica (the first of its assignment, which
    lost it when it was killed) with a preferred election (LeaderElectionCommand PREFERRED):
    the new leader."""
    deadline = time.monotonic() + 30
    while True:  # the preferred replica must be in sync to be elected
        leader, replicas, isr = partition_state(cluster, tp)
        assert replicas[0] != leader, f"{tp}: the preferred replica {leader} leads already"
        if replicas[0] in isr:
            break
        assert time.monotonic() < deadline, f"{tp}: {replicas[0]} not in sync ({isr})"
        time.sleep(0.2)
    target = replicas[0]
    result = cluster.tool(
        ELECTION_COMMAND, "--bootstrap-server", cluster.bootstrap,
        "--election-type", "PREFERRED", "--topic", tp.topic, "--partition", str(tp.partition),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    deadline = time.monotonic() + 30
    while partition_state(cluster, tp)[0] != target:
        assert time.monotonic() < deadline, f"leader of {tp} did not move to {target}"
        time.sleep(0.2)
    return target


def test_leader_and_coordinator_kills_restart_and_leader_move_never_show_a_false_number(
    three_brokers: RealKafkaCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = three_brokers
    topic = create_topic(cluster, unique("faults"), partitions=3, replication=3)
    transactional_id = unique("faults-txn")
    # The coordinator is fixed by the id (a hash onto __transaction_state): the transaction
    # goes to a partition another broker leads, so each kill hits one role only.
    coordinator = transaction_coordinator(cluster, transactional_id)
    partition = next(
        p for p in range(3) if partition_state(cluster, TopicPartition(topic, p))[0] != coordinator
    )
    producer_id, epoch, start_offset = hanging_transaction(
        cluster.bootstrap, transactional_id, topic, partition, backdate_ms=LATE_BACKDATE_MS
    )
    truth = Truth(
        TopicPartition(topic, partition), producer_id, epoch, start_offset, transactional_id
    )
    loop = PollLoop(cluster)
    thread = threading.Thread(target=loop.run, name="poll-loop", daemon=True)
    thread.start()
    measured: dict[str, int] = {}
    failover_polls = -1
    try:
        first = loop.wait_for(fully_recovered(truth), 0.0, 30, "first full picture")
        leader = first.snapshot.late_transactions[0].transaction.leader_id
        assert leader != coordinator

        # 1. kill -9 of the transactional id's coordinator inside a poll, restarted at once:
        # the transaction stays late on its leader, its hanging verdict unknown meanwhile.
        assert transaction_coordinator(cluster, transactional_id) == coordinator
        loop.phase = f"kill -9 coordinator {coordinator}"
        killed_at = time.monotonic()
        loop.kill_mid_poll(coordinator)
        loop.phase = f"restart {coordinator}"
        cluster.restart(coordinator)
        back = time.monotonic()
        loop.phase = f"back {coordinator}"
        done = loop.wait_for(fully_recovered(truth), back, 30, "recovery after coordinator")
        measured["coordinator kill: polls to recovery after restart"] = loop.polls_between(
            back, done
        )
        assert any(
            late_on(s, leader) == (1, None)
            for s in loop.samples[: done.index]
            if s.started >= killed_at
        ), "the coordinator's kill never showed: hanging unknown, late still 1"

        # 2. kill -9 of the partition's leader inside a poll: the exporter follows the new
        # leader while the old one is down, and recovers fully once it is back.
        loop.phase = f"kill -9 leader {leader}"
        killed_at = time.monotonic()
        loop.kill_mid_poll(leader)
        moved = loop.wait_for(
            lambda s: fully_recovered(truth, up=2)(s)
            and s.snapshot.late_transactions[0].transaction.leader_id != leader,
            killed_at, FAILOVER_DEADLINE_SECONDS, "new leader reports the transaction",
        )  # fmt: skip
        failover_polls = loop.polls_between(killed_at, moved)
        assert late_on(loop.samples[moved.index - 1], leader) == (None, None)
        loop.phase = f"restart {leader}"
        cluster.restart(leader)
        back = time.monotonic()
        loop.phase = f"back {leader}"
        done = loop.wait_for(fully_recovered(truth), back, 30, "recovery after leader restart")
        measured["leader kill: polls to recovery after restart"] = loop.polls_between(back, done)

        # 3. a leader move: the preferred replica (the killed leader, back) elected again.
        loop.phase = "leader move"
        moving = time.monotonic()
        target = elect_preferred_leader(cluster, truth.tp)
        moved_at = time.monotonic()
        loop.phase = f"moved to {target}"
        done = loop.wait_for(fully_recovered(truth, leader=target), moving, 30, "leader move")
        # 0: shown by a poll that started before Kafka's own Metadata check saw the move.
        measured["leader move: polls to the new leader after the move"] = loop.polls_between(
            moved_at, done
        )

        # 4. a clean restart (SIGTERM: controlled shutdown) of the partition's leader.
        leader = done.snapshot.late_transactions[0].transaction.leader_id
        loop.phase = f"SIGTERM leader {leader}"
        cluster.kill(leader, signal.SIGTERM)
        loop.phase = f"restart {leader}"
        cluster.restart(leader)
        back = time.monotonic()
        loop.phase = f"back {leader}"
        done = loop.wait_for(fully_recovered(truth), back, 30, "recovery after clean restart")
        measured["clean restart: polls to recovery after restart"] = loop.polls_between(back, done)
    finally:
        loop.stop()
        thread.join(30)
        with capsys.disabled():
            print(
                f"\n[{cluster.install.version}] polls: {len(loop.samples)}; "
                f"leader kill: polls to the new leader {failover_polls}; {measured}"
            )
            for line in summarize(loop.samples):
                print(line)
    assert loop.failure is None, repr(loop.failure)
    for sample in loop.samples:
        check_no_false_number(sample, truth)
    assert max(measured.values()) <= RECOVERY_POLLS_BOUND, measured
