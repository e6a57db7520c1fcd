"""What the real-client tests share (librdkafka, Kafka Streams, Flink): a broker of their own
that can be restarted and lose its transaction log, the exporter polling in a thread with every
verdict kept, Kafka's `kafka-transactions.sh list/describe` as the oracle, and children that
die with the test."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafka_sim.realkafka import RealKafkaCluster, _die_with_parent, java_command, kafka_home
from realhelpers import TRANSACTIONS_COMMAND, poll_env

from exporter.model import (
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    OpenTransaction,
    TopicPartition,
)

HERE = Path(__file__).resolve().parent
CLIENTS_BROKER_CONFIG = {
    # The coordinator looks for timed-out transactions every second (default 10 s): a killed
    # producer's transaction is aborted soon after its own transaction.timeout.ms.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}


def clients_home() -> Path:
    """Where scripts/install-clients puts the Streams and Flink jars and the compiled apps."""
    return kafka_home().parent / "clients"


# --------------------------------------------------------------------------- children


def spawn(args: Sequence[str], log: Path) -> subprocess.Popen[str]:
    """A child in a session of its own that dies with this process; stdout piped (line
    protocol), stderr to `log`."""
    with open(log, "ab") as err:
        return subprocess.Popen(
            list(args), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
            text=True, bufsize=1, preexec_fn=_die_with_parent,
        )  # fmt: skip


def rdkafka_producer(*args: str, log: Path) -> subprocess.Popen[str]:
    return spawn([sys.executable, str(HERE / "rdkafka_producer.py"), *args], log)


FLINK_JVM = (
    "-Xmx640m",
    # What Flink's own launch scripts open on Java 17 (its serializers reflect on them).
    *(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
        "java.lang", "java.lang.reflect", "java.util", "java.util.concurrent", "java.io",
        "java.net", "java.nio", "sun.nio.ch", "java.time", "java.text", "java.math",
    )),
)  # fmt: skip


def java_app(
    lib: Path, classes: Path, main: str, *args: str, log: Path, jvm: Sequence[str] = ("-Xmx256m",)
) -> subprocess.Popen[str]:
    options = [*jvm, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    return spawn([java_command(), *options, "-cp", f"{lib}/*:{classes}", main, *args], log)


def flink_home() -> Path:
    """The Flink installation scripts/install-clients made (its version in flink-version)."""
    marker = clients_home() / "flink-version"
    assert marker.exists(), f"{marker} is missing: run scripts/install-clients"
    home = clients_home() / f"flink-{marker.read_text().strip()}"
    assert (home / "complete").exists() and (home / "classes").exists(), (
        f"{home}: run scripts/install-clients"
    )
    return home


def read_line(child: subprocess.Popen[str], prefix: str, timeout_s: float, log: Path) -> str:
    """The child's first stdout line starting with `prefix` (lines before it are dropped)."""
    found: list[str] = []

    def reader() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(prefix):
                found.append(line.strip())
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not found:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise AssertionError(f"no {prefix!r} line within {timeout_s} s (rc={child.poll()}): {tail}")
    return found[0]


def kill9(child: subprocess.Popen[str]) -> None:
    """SIGKILL the child's whole session (a JVM and its threads, or Python), and reap it."""
    if child.poll() is None:
        import os

        os.killpg(child.pid, signal.SIGKILL)
    child.wait(timeout=30)


# --------------------------------------------------------------------------- the oracle


@dataclass(frozen=True)
class TxnRow:
    """One line of `kafka-transactions.sh list` (with describe's partitions when asked)."""

    transactional_id: str
    producer_id: int
    state: str


def list_transactions(cluster: RealKafkaCluster) -> dict[str, TxnRow]:
    """`kafka-transactions.sh list`: transactional id -> (producer id, state)."""
    result = cluster.tool(TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap, "list")
    assert result.returncode == 0, result.stdout + result.stderr
    rows: dict[str, TxnRow] = {}
    for line in result.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 4 and fields[2].isdigit():
            rows[fields[0]] = TxnRow(fields[0], int(fields[2]), fields[3])
    return rows


def describe_transaction(cluster: RealKafkaCluster, transactional_id: str) -> dict[str, str]:
    """`kafka-transactions.sh describe --transactional-id ID`: header -> value."""
    result = cluster.tool(
        TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap, "describe",
        "--transactional-id", transactional_id,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    # Columns are separated by runs of spaces; values (the partition list) have no spaces.
    import re

    header = re.split(r"\s{2,}|\t", lines[0].strip())
    values = re.split(r"\s{2,}|\t", lines[1].strip()) if len(lines) > 1 else []
    return dict(zip(header, values, strict=False))


def listed_producers(cluster: RealKafkaCluster) -> dict[int, str]:
    """Producer id -> transactional id from the broker's own ListTransactions (v0, one
    coordinator: the clients' broker has one node); empty while the broker does not answer."""
    from kafka.protocol.admin.transactions import ListTransactionsRequest
    from kafka_sim.client import RawKafkaClient

    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    try:
        client = RawKafkaClient(host, int(port))
    except OSError:
        return {}
    try:
        response = client.request(
            ListTransactionsRequest(version=0, state_filters=[], producer_id_filters=[])
        )
    except (OSError, EOFError):
        return {}
    finally:
        client.close()
    return {int(t.producer_id): str(t.transactional_id) for t in response.transaction_states}


# --------------------------------------------------------------------------- the exporter


@dataclass(frozen=True)
class Verdict:
    """What one poll said about one open transaction of the watched topics."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    transactional_id: str | None
    tracked: bool | None
    """Its coordinator lists the partition (None: not asked about yet, or no answer)."""
    late: Classification | None
    orphaned: bool


@dataclass
class PollRecord:
    started: float
    phase: str
    observation: ClusterObservation
    snapshot: ClusterSnapshot
    verdicts: tuple[Verdict, ...]


def verdicts_of(
    observation: ClusterObservation, snapshot: ClusterSnapshot, topics: Iterable[str]
) -> tuple[Verdict, ...]:
    wanted = set(topics)
    late = {t.transaction.key: t.classification for t in snapshot.late_transactions}
    orphaned = {o.transaction.key for o in snapshot.orphaned_transactions}
    out: list[Verdict] = []
    for txn in observation.open_transactions:
        if txn.topic not in wanted:
            continue
        tid = observation.transactional_ids.get(txn.producer_id)
        out.append(
            Verdict(
                txn.topic, txn.partition, txn.producer_id, txn.producer_epoch,
                txn.current_txn_start_offset, tid, _tracked(observation, txn, tid),
                late.get(txn.key), txn.key in orphaned,
            )
        )  # fmt: skip
    return tuple(out)


def _tracked(observation: ClusterObservation, txn: OpenTransaction, tid: str | None) -> bool | None:
    if tid is None or tid not in observation.descriptions:
        return None
    description = observation.descriptions[tid]
    if description is None:
        return False
    return TopicPartition(txn.topic, txn.partition) in description.topic_partitions


@dataclass
class VerdictLoop:
    """The exporter's poller in a thread, every poll's verdicts on `topics` kept."""

    cluster: RealKafkaCluster
    topics: set[str]
    interval_s: float = 0.5
    phase: str = "start"
    records: list[PollRecord] = field(default_factory=list)
    failure: BaseException | None = None
    producer_ids: dict[int, str] = field(default_factory=dict)
    """Producer id -> transactional id, from every poll's coordinator view. The exporter maps
    only the producers of transactions it asks the coordinators about (those seen open on two
    polls in a row); a producer id keeps its transactional id, so one mapping names them all."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def transactional_id(self, verdict: Verdict) -> str | None:
        """The verdict's transactional id, or the one its producer id had on another poll or
        in the broker's own ListTransactions answer."""
        return verdict.transactional_id or self.producer_ids.get(verdict.producer_id)

    def run(self) -> None:
        try:
            with poll_env(self.cluster, request_timeout_seconds=10) as env:
                while not self._stop.is_set():
                    started = time.monotonic()
                    observation, snapshot = env.poll()
                    record = PollRecord(
                        started, self.phase, observation, snapshot,
                        verdicts_of(observation, snapshot, self.topics),
                    )  # fmt: skip
                    listed = listed_producers(self.cluster)
                    with self._cond:
                        self.producer_ids.update(listed)
                        self.producer_ids.update(observation.transactional_ids)
                        self.records.append(record)
                        self._cond.notify_all()
                    self._stop.wait(max(0.0, started + self.interval_s - time.monotonic()))
        except BaseException as exc:  # surfaced by the test
            self.failure = exc

    def wait_for(
        self,
        what: str,
        predicate: Callable[[PollRecord], bool],
        timeout_s: float,
        after: float | None = None,
    ) -> PollRecord:
        """The first poll (started after `after`, default now) that satisfies `predicate`."""
        start = time.monotonic() if after is None else after
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for record in self.records:
                    if record.started >= start and predicate(record):
                        return record
                assert self.failure is None, f"poll loop failed: {self.failure!r}"
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    last = self.records[-1].verdicts if self.records else None
                    raise AssertionError(f"{what}: not within {timeout_s} s; last: {last}")
                self._cond.wait(remaining)

    def false_verdicts(
        self, allowed: Callable[[Verdict], bool] = lambda v: False
    ) -> list[tuple[str, Verdict]]:
        """Every late or orphaned verdict on the watched topics that `allowed` does not
        expect: with no fault that takes a transaction from its coordinator, every one is
        false."""
        return [
            (r.phase, v)
            for r in self.records
            for v in r.verdicts
            if (v.late is not None or v.orphaned) and not allowed(v)
        ]

    def distinct_transactions(self) -> set[tuple[str, int, int, int, int]]:
        return {
            (v.topic, v.partition, v.producer_id, v.producer_epoch, v.start_offset)
            for r in self.records
            for v in r.verdicts
        }


@dataclass
class Running:
    loop: VerdictLoop
    thread: threading.Thread

    def stop(self) -> None:
        self.loop._stop.set()
        self.thread.join(60)
        assert self.loop.failure is None, f"poll loop failed: {self.loop.failure!r}"


def start_loop(cluster: RealKafkaCluster, topics: Iterable[str]) -> Running:
    loop = VerdictLoop(cluster, set(topics))
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    return Running(loop, thread)


def wipe_transaction_log(cluster: RealKafkaCluster, node_id: int = 1) -> int:
    """Delete every __transaction_state partition of a STOPPED node: the transaction log lost
    (as an unclean leader election or a lost disk loses it). Returns how many were deleted."""
    assert not cluster.is_running(node_id)
    data = cluster.workdir / f"node-{node_id}" / "data"
    removed = 0
    for directory in data.glob("__transaction_state-*"):
        shutil.rmtree(directory)
        removed += 1
    return removed


@dataclass
class Lines:
    """Every stdout line of a child, read in a thread, to wait on (a state it announced)."""

    child: subprocess.Popen[str]
    log: Path
    lines: list[str] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()

    def wait(
        self, what: str, predicate: Callable[[str], bool], timeout_s: float, start: int = 0
    ) -> int:
        """The index of the first line from `start` on that satisfies `predicate`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for index in range(start, len(self.lines)):
                    if predicate(self.lines[index]):
                        return index
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.child.poll() is not None and not remaining):
                    tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
                    raise AssertionError(
                        f"{what}: not within {timeout_s} s (rc={self.child.poll()}, "
                        f"lines={self.lines[-5:]}): {tail}"
                    )
                self._cond.wait(min(remaining, 1.0))


@dataclass
class Feed:
    """A plain (not transactional) librdkafka producer writing to `topic` in a thread until
    stopped: input for a stream processor."""

    bootstrap: str
    topic: str
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Feed:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        while not self._stop.is_set():
            for _ in range(20):
                try:
                    producer.produce(self.topic, key=str(self.sent).encode(), value=b"x")
                except BufferError:  # its queue is full while the broker is away: wait
                    producer.poll(0.5)
                    continue
                self.sent += 1
            producer.poll(0)
            self._stop.wait(0.02)
        producer.flush(30)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
