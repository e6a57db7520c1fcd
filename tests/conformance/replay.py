"""Replays the real-broker capture's timeline on the simulator and records its answers.

The steps are those of tests/data/real-kafka-4.0/README.md ("Timeline of the run"), in the same
order, so producer ids are allocated in the same order (0 idempotent, 1 tx-committed-1,
2 tx-open-1, 3 hang-1, 4 tx-timeout-1). Every captured request is sent verbatim (same bytes,
same correlation id) on one "golden" connection, except Fetch, whose topic ids are the
simulator's (the request is decoded, its topic ids swapped, and re-encoded). Time moves with
the simulator clock's advance() instead of waiting.

A failing step does not stop the replay: its error is recorded and every capture whose
exchange did not happen fails with that error.
"""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka_sim.client import (
    ConnectionClosedError,
    KafkaProtocolError,
    RawKafkaClient,
    response_class,
)
from kafka_sim.producer import (
    OpenTransaction,
    TransactionResult,
    committed_transaction,
    hanging_transaction,
    idempotent_producer_write,
    open_transaction,
)
from simhelpers import CAPTURE_BROKER_CONFIG

from .harness import Capture, load_captures
from .probes import (
    DESCRIBE_TRANSACTIONS,
    control_batch_timestamp,
    fetch_batches,
    fetch_from_start_request,
    marker_written,
    offers,
    topic_id,
    wait_until,
)

TOPICS = {"txn-open": 3, "txn-committed": 1, "hang-test": 3}
BROKER_CONFIG = CAPTURE_BROKER_CONFIG
NODE_ID = 1
HANG_BACKDATE_MS = 400000
TIMEOUT_AFTER_ADVANCE_MS = 25000
FINAL_AFTER_OPEN_START_MS = 80000
SWEEP_WAIT_SECONDS = 5.0
COORDINATOR_LOAD_IN_PROGRESS = 14
CLOSE_WAIT_SECONDS = 3.0
LIVE_WAIT_SECONDS = 60.0
"""Bound on waiting for a real broker's own state (a coordinator loaded, a marker written)."""

# Record keys and values as in the capture's decoded record batches (26, 33, 35, 49), so batch
# lengths match byte for byte. txn-open-1's record is not in any Fetch capture: "k3"/"open-txn-3".
IDEMPOTENT_RECORD = (b"idem-k0", b"idempotent-0")
COMMITTED_RECORDS = [(b"c-k0", b"committed-0"), (b"c-k1", b"committed-1")]
OPEN_RECORDS_P0 = [(b"k0", b"open-txn-0"), (b"k1", b"open-txn-1"), (b"k2", b"open-txn-2")]
OPEN_RECORD_P1 = (b"k3", b"open-txn-3")
TIMEOUT_RECORD = (b"t0", b"timeout-txn-0")
HANG_RECORD = (b"hang-key-0", b"hanging txn hang-1 record 0")


@dataclass
class Exchange:
    """What the simulator did with one captured request."""

    file: str
    request: bytes
    response: bytes | None = None
    closed: bool = False
    error: str | None = None
    sent_at_ms: int = 0
    received_at_ms: int = 0


@dataclass
class Window:
    """A span of simulator time in which something must have been stamped."""

    lo_ms: int
    hi_ms: int

    def holds(self, value: int) -> bool:
        return self.lo_ms <= value <= self.hi_ms


@dataclass
class ReplayFacts:
    """What the replay did, to check relations against."""

    sim_topic_ids: dict[str, str] = field(default_factory=dict)
    capture_topic_ids: dict[str, str] = field(default_factory=dict)
    idempotent: TransactionResult | None = None
    committed: TransactionResult | None = None
    committed_window: Window | None = None
    open_txn: TransactionResult | None = None
    open_add_window: Window | None = None
    hang: tuple[int, int, int] | None = None
    hang_timestamp_ms: int | None = None
    timeout_txn: TransactionResult | None = None
    timeout_add_window: Window | None = None
    timeout_abort_window: Window | None = None
    open_abort_window: Window | None = None
    commit_marker_ts: int | None = None
    timeout_abort_marker_ts: int | None = None
    open_abort_marker_ts: dict[int, int | None] = field(default_factory=dict)
    """txn-open partition -> timestamp of tx-open-1's ABORT control batch there."""
    find_coordinator_attempts: int = 0


class Replay:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.captures: dict[str, Capture] = load_captures()
        self.exchanges: dict[str, Exchange] = {}
        self.step_errors: list[str] = []
        self.facts = ReplayFacts()
        host, port = cluster.endpoints[NODE_ID]
        self.host: str = host
        self.port: int = port
        self.bootstrap: str = cluster.bootstrap_servers
        self._golden: RawKafkaClient | None = None
        ctx = self.captures["04-metadata-v13-topics.json"].data.get("context") or {}
        self.facts.capture_topic_ids = dict(ctx.get("topic_ids", {}))

    # --- plumbing ----------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.cluster.clock.now_ms())

    def golden(self) -> RawKafkaClient:
        if self._golden is None:
            self._golden = RawKafkaClient(self.host, self.port, client_id="golden-capture")
        return self._golden

    def close(self) -> None:
        if self._golden is not None:
            self._golden.close()
            self._golden = None

    def step(self, name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            self.step_errors.append(f"step {name!r} failed:\n{traceback.format_exc(limit=6)}")

    def _rewrite_fetch(self, cap: Capture) -> bytes:
        """Same Fetch request with the simulator's topic ids (the only value that must change)."""
        req = FetchRequest.decode(cap.request_bytes, version=cap.request_version, header=True)
        by_capture_id = {v: k for k, v in self.facts.capture_topic_ids.items()}
        for topic in req.topics:
            name = by_capture_id[str(topic.topic_id)]
            sim_id = self.facts.sim_topic_ids.get(name)
            if sim_id is None:
                raise RuntimeError(f"simulator topic id of {name} unknown (Metadata 04 failed?)")
            topic.topic_id = uuid.UUID(sim_id)
        header = req.header
        req.with_header(correlation_id=header.correlation_id, client_id=header.client_id)
        return bytes(req.encode(header=True))

    def send(self, file: str) -> Exchange:
        """Send one captured request on the golden connection and record the answer."""
        cap = self.captures[file]
        ex = Exchange(file=file, request=cap.request_bytes)
        self.exchanges[file] = ex
        try:
            if cap.api_key == 1:
                ex.request = self._rewrite_fetch(cap)
            client = self.golden()
            ex.sent_at_ms = self.now_ms()
            client.send_raw(ex.request)
            if cap.connection_closed:
                client.settimeout(CLOSE_WAIT_SECONDS)
            ex.response = client.receive_raw()
        except (ConnectionClosedError, ConnectionResetError, BrokenPipeError) as exc:
            ex.closed = True
            ex.error = None if cap.connection_closed else f"connection closed: {exc!r}"
            self.close()
        except TimeoutError:
            ex.error = "no reply, and the connection is still open"
            self.close()
        except Exception:
            ex.error = traceback.format_exc(limit=6)
            self.close()
        ex.received_at_ms = self.now_ms()
        if cap.connection_closed and not ex.closed:
            self.close()  # the capture reconnected after the broker closed this one
        return ex

    def decoded(self, file: str) -> Any:
        ex = self.exchanges.get(file)
        if ex is None or ex.response is None:
            return None
        cap = self.captures[file]
        assert cap.api_key is not None
        cls = response_class(cap.api_key, cap.response_version)
        return cls.decode(ex.response, version=cap.response_version, header=True)

    def describe_transaction(self, transactional_id: str) -> Any:
        with RawKafkaClient(self.host, self.port) as client:
            resp = client.request(
                DescribeTransactionsRequest[0](transactional_ids=[transactional_id])
            )
        return resp.transaction_states[0]

    def wait_for_state(
        self,
        transactional_id: str,
        state: str,
        marker: tuple[str, int, TransactionResult | None] | None = None,
    ) -> None:
        """Let the simulator's periodic sweep (real time ticks) act after a clock advance. A
        broker without DescribeTransactions (before 3.0) is asked for the transaction's
        `marker` instead: (topic, partition, producer) holds its control batch."""
        deadline = time.monotonic() + SWEEP_WAIT_SECONDS
        if marker is not None and not offers(self.cluster, DESCRIBE_TRANSACTIONS):
            topic, partition, txn = marker
            if txn is None:
                raise RuntimeError(f"{transactional_id} was not made")
            done = wait_until(
                lambda: marker_written(self.cluster, topic, partition, txn.producer_id),
                bool,
                LIVE_WAIT_SECONDS,
            )
            if not done:
                raise RuntimeError(f"no marker of {transactional_id} on {topic}-{partition}")
            return
        while time.monotonic() < deadline:
            if self.describe_transaction(transactional_id).transaction_state == state:
                return
            time.sleep(0.05)

    def marker_timestamp(self, file: str, topic_partition: str, control_type: str) -> int | None:
        """Timestamp of the control batch in the simulator's own Fetch answer."""
        resp = self.decoded(file)
        if resp is None:
            return None
        return control_batch_timestamp(resp, control_type)

    def fetch_marker_timestamp(self, topic: str, partition: int, control_type: str) -> int | None:
        """Extra Fetch (own connection) to read a marker no capture fetched (tx-open-1 ABORT)."""
        req = fetch_from_start_request(uuid.UUID(self.facts.sim_topic_ids[topic]), partition)
        with RawKafkaClient(self.host, self.port) as client:
            resp = client.request(req)
        return control_batch_timestamp(resp, control_type)

    # --- the timeline ------------------------------------------------------------------------

    def run(
        self,
        *,
        timeouts: bool = True,
        timeout_txn_ms: int = 10000,
        timeout_advance_ms: int = TIMEOUT_AFTER_ADVANCE_MS,
        final: bool = True,
        after_errors: Callable[[], object] | None = None,
        after_final: Callable[[], object] | None = None,
    ) -> None:
        """The capture's timeline; `timeouts=False` stops after the ERRORS phase (41), before
        the phases that need 25 s and 80 s of broker time (a live broker cannot skip them).
        `after_errors` / `after_final` run where the capture ran Kafka's CLI and JMX tools
        (42-44, 54): scripts/refresh-captures records them there. A live comparison shortens
        tx-timeout-1 (`timeout_txn_ms`, `timeout_advance_ms`) and leaves out FINAL (50-54,
        which waits 80 s for tx-open-1's 60 s timeout): `final=False`."""
        f = self.facts
        for file in ("01-apiversions-v3.json", "02-apiversions-v0.json", "03-apiversions-v4.json"):
            self.send(file)
        # Topics were created with the cluster (txn-open(3), txn-committed(1), hang-test(3)).
        self.send("04-metadata-v13-topics.json")
        self.step("learn topic ids", self._learn_topic_ids)
        for file in (
            "05-metadata-v13-unknown-topic.json",
            "06-describeconfigs-v4-broker-all.json",
            "07-describeconfigs-v4-broker-txn-keys.json",
            # The first transaction lookup on a fresh cluster: COORDINATOR_NOT_AVAILABLE.
            "08-findcoordinator-v6-batched-first-attempt.json",
        ):
            self.send(file)
        self.step("FindCoordinator retried until answered", self._find_coordinator_until_ok)
        for file in (
            "10-findcoordinator-v3-tx-open-1.json",
            "11-findcoordinator-v3-tx-committed-1.json",
            "12-findcoordinator-v3-hang-1.json",
            "13-findcoordinator-v3-never-used-id.json",
        ):
            self.send(file)

        def idempotent() -> None:
            # A fresh real broker answers its first InitProducerId with
            # COORDINATOR_LOAD_IN_PROGRESS (14) until its producer id block arrives from the
            # controller; a client retries (Kafka's InitProducerIdRequest handling).
            deadline = time.monotonic() + SWEEP_WAIT_SECONDS
            while True:
                try:
                    f.idempotent = idempotent_producer_write(
                        self.bootstrap,
                        "txn-committed",
                        0,
                        records=[IDEMPOTENT_RECORD],
                        now_ms=self.now_ms,
                    )
                    return
                except KafkaProtocolError as exc:
                    if exc.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                        raise
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

        self.step("idempotent producer (pid 0) writes 1 record to txn-committed-0", idempotent)

        def committed() -> None:
            lo = self.now_ms()
            ts = self.now_ms()
            f.committed = committed_transaction(
                self.bootstrap,
                "tx-committed-1",
                "txn-committed",
                {0: [(k, v, ts) for k, v in COMMITTED_RECORDS]},
                transaction_timeout_ms=60000,
                one_batch_per_record=False,
                now_ms=self.now_ms,
            )
            # The coordinator writes the COMMIT markers after EndTxn has answered: a live 3.9
            # broker still says PrepareCommit for a moment (the simulator completes at once).
            self.wait_for_state(
                "tx-committed-1", "CompleteCommit", ("txn-committed", 0, f.committed)
            )
            f.committed_window = Window(lo, self.now_ms())

        self.step("tx-committed-1 (pid 1) commits 2 records to txn-committed-0", committed)

        def open_txn() -> None:
            txn: OpenTransaction = open_transaction(
                self.bootstrap, "tx-open-1", transaction_timeout_ms=60000, now_ms=self.now_ms
            )
            # CreateTimes spaced like the capture's (+0, +9, +14, +17 ms) so that every
            # timestamp relation is checked on distinct values.
            base = self.now_ms() - 100
            stamped = [
                (k, v, base + d) for (k, v), d in zip(OPEN_RECORDS_P0, (0, 9, 14), strict=True)
            ]
            lo = self.now_ms()
            txn.send("txn-open", 0, [stamped[0]])
            f.open_add_window = Window(lo, self.now_ms())
            txn.send("txn-open", 0, [stamped[1]])
            txn.send("txn-open", 0, [stamped[2]])
            txn.send("txn-open", 1, [(*OPEN_RECORD_P1, base + 17)])
            f.open_txn = txn.result()
            txn.close_quietly()  # stays open on the broker

        self.step("tx-open-1 (pid 2) writes 3+1 batches and stays open", open_txn)

        for n in range(14, 27):
            self.send(self._file(n))
        self.step("commit marker timestamp", self._commit_marker)

        def hang() -> None:
            made_at_ms = self.now_ms()
            f.hang_timestamp_ms = made_at_ms - HANG_BACKDATE_MS
            f.hang = hanging_transaction(
                self.bootstrap,
                "hang-1",
                "hang-test",
                0,
                backdate_ms=HANG_BACKDATE_MS,
                records=[HANG_RECORD],
                transaction_timeout_ms=10000,
                now_ms=lambda: made_at_ms,
            )

        self.step("hang-1 (pid 3): InitProducerId + Produce v11, no AddPartitionsToTxn", hang)

        for n in range(27, 42):
            self.send(self._file(n))  # 40 closes the connection; 41 goes on a new one
        if after_errors is not None:
            self.step("CLI and JMX after ERRORS", after_errors)
        if not timeouts:
            self.close()
            return

        def timeout_txn() -> None:
            txn = open_transaction(
                self.bootstrap,
                "tx-timeout-1",
                transaction_timeout_ms=timeout_txn_ms,
                now_ms=self.now_ms,
            )
            lo = self.now_ms()
            txn.send("txn-open", 2, [TIMEOUT_RECORD])
            f.timeout_add_window = Window(lo, self.now_ms())
            f.timeout_txn = txn.abandon()

        self.step("tx-timeout-1 (pid 4) writes to txn-open-2, abandoned", timeout_txn)
        self.send("45-timeout-before-describeproducers-txn-open-2.json")
        self.send("46-timeout-before-describetransactions-tx-timeout-1.json")

        def timeout_after() -> None:
            lo = self.now_ms()
            self.cluster.clock.advance(timeout_advance_ms)
            self.wait_for_state("tx-timeout-1", "CompleteAbort", ("txn-open", 2, f.timeout_txn))
            f.timeout_abort_window = Window(lo, self.now_ms())

        self.step("advance the clock (tx-timeout-1 times out)", timeout_after)
        for n in (47, 48, 49):
            self.send(self._file(n))
        self.step("timeout ABORT marker timestamp", self._timeout_marker)
        if not final:
            self.close()
            return

        def final() -> None:
            start = f.open_add_window.lo_ms if f.open_add_window else self.now_ms()
            lo = start + 60000
            self.cluster.clock.advance(max(0, start + FINAL_AFTER_OPEN_START_MS - self.now_ms()))
            self.wait_for_state("tx-open-1", "CompleteAbort")
            f.open_abort_window = Window(lo, self.now_ms())

        self.step("advance the clock to >= 80 s after tx-open-1 began", final)
        for n in (50, 51, 52, 53):
            self.send(self._file(n))
        self.step("tx-open-1 ABORT marker timestamp", self._open_marker)
        if after_final is not None:
            self.step("JMX after FINAL", after_final)
        self.close()

    def _file(self, n: int) -> str:
        prefix = f"{n:02d}-"
        return next(name for name in self.captures if name.startswith(prefix))

    def _learn_topic_ids(self) -> None:
        resp = self.decoded("04-metadata-v13-topics.json")
        if resp is None and self.exchanges["04-metadata-v13-topics.json"].closed:
            # A broker without Metadata v13 (3.9: v12) closed the connection: ask with v12.
            for name in TOPICS:
                self.facts.sim_topic_ids[name] = str(topic_id(self.cluster, name))
            return
        if resp is None:
            raise RuntimeError("no Metadata answer")
        for topic in resp.topics:
            if topic.topic_id is not None:
                self.facts.sim_topic_ids[topic.name] = str(topic.topic_id)

    def _find_coordinator_until_ok(self) -> None:
        """The capture retried the batched lookup until __transaction_state was ready (09)."""
        file = "09-findcoordinator-v6-batched.json"
        deadline = time.monotonic() + SWEEP_WAIT_SECONDS
        while True:
            self.facts.find_coordinator_attempts += 1
            self.send(file)
            resp = self.decoded(file)
            if resp is None and self.exchanges[file].closed:
                self._single_key_lookup_until_ok(time.monotonic() + LIVE_WAIT_SECONDS)
                return
            ok = resp is not None and all(c.error_code == 0 for c in resp.coordinators)
            if ok or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def _single_key_lookup_until_ok(self, deadline: float) -> None:
        """A release without the batched lookup (FindCoordinator v4, Kafka 3.0) closed 08 and
        09 unanswered: the one-key lookup a client of that release sends creates
        __transaction_state and is repeated until the coordinator answers, so the captured
        lookups (10-13) find it loaded (a ZooKeeper-mode broker takes seconds to load it)."""
        version = min(3, self._highest(FindCoordinatorRequest.API_KEY))
        while True:
            with RawKafkaClient(self.host, self.port) as client:
                resp = client.request(
                    FindCoordinatorRequest[version](key="tx-open-1", key_type=1)
                )
            if resp.error_code == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def _highest(self, api_key: int) -> int:
        with RawKafkaClient(self.host, self.port) as client:
            return client.negotiate()[api_key][1]

    def _commit_marker(self) -> None:
        file = "26-committed-fetch-txn-committed-0-read-uncommitted.json"
        self.facts.commit_marker_ts = self._marker_ts(file, "txn-committed", 0, "COMMIT")

    def _timeout_marker(self) -> None:
        file = "49-timeout-after-fetch-txn-open-2-read-uncommitted.json"
        self.facts.timeout_abort_marker_ts = self._marker_ts(file, "txn-open", 2, "ABORT")

    def _marker_ts(self, file: str, topic: str, partition: int, control_type: str) -> int | None:
        """The marker's timestamp from the captured Fetch's answer; where the release closed
        that Fetch (topic ids in Fetch from v13, Kafka 3.1), from a Fetch at its own version."""
        if self.decoded(file) is not None or not self.exchanges[file].closed:
            return self.marker_timestamp(file, f"{topic}-{partition}", control_type)
        for batch in fetch_batches(self.cluster, topic, partition):
            for rec in batch["records"]:
                if rec.get("control", {}).get("type") == control_type:
                    return int(batch["max_timestamp"])
        return None

    def _open_marker(self) -> None:
        for partition in (0, 1):
            ts = self.fetch_marker_timestamp("txn-open", partition, "ABORT")
            self.facts.open_abort_marker_ts[partition] = ts
