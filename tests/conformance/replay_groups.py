"""Replays the consumer-group capture's scenario on the simulator and records its answers.

The scenario is that of tests/data/real-kafka-4.0-groups/README.md: on grp-test-0 a committed
transaction of 5 records (producer 0), a hanging transaction (producer 1, never added at its
coordinator, CreateTime 1 h back), then a committed transaction of 3 records (producer 2); an
idempotent record on the compacted grp-compacted; then three groups that commit without
membership, made with kafka-python's KafkaConsumer (`assign()` + `commit()`): grp-rc
(read_committed, stops at the LSO), grp-ru (read_uncommitted, reaches the high watermark) and
grp-lagging (commits offset 2). Then every captured request is sent verbatim, in file order, on
one connection.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_sim.client import ConnectionClosedError, RawKafkaClient, response_class
from kafka_sim.consumer import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ConsumedPosition,
    commit_offset,
    consume_and_commit,
)
from kafka_sim.producer import (
    TransactionResult,
    committed_transaction,
    hanging_transaction,
    idempotent_producer_write,
)
from simhelpers import CAPTURE_BROKER_CONFIG

from .harness import GROUPS_DATA_DIR, Capture, load_captures
from .probes import (
    DESCRIBE_TRANSACTIONS,
    control_batches,
    describe_transaction,
    marker_written,
    offers,
    wait_until,
)

TOPIC = "grp-test"
COMPACTED = "grp-compacted"
TOPICS = {TOPIC: 3}
COMPACTED_CONFIGS = {"cleanup.policy": "compact"}
BROKER_CONFIG = CAPTURE_BROKER_CONFIG
NODE_ID = 1
HANG_BACKDATE_MS = 3_600_000
LAGGING_OFFSET = 2


@dataclass
class GroupExchange:
    file: str
    response: bytes | None = None
    error: str | None = None


@dataclass
class GroupFacts:
    first_txn: TransactionResult | None = None
    hang: tuple[int, int, int] | None = None
    hang_timestamp_ms: int | None = None
    second_txn: TransactionResult | None = None
    consumed: dict[str, ConsumedPosition] = field(default_factory=dict)
    marker_timestamps: dict[int, int] = field(default_factory=dict)
    """producer id -> max timestamp of its COMMIT marker on grp-test-0 (the sim's own log)."""


class GroupsReplay:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.captures: dict[str, Capture] = load_captures(GROUPS_DATA_DIR)
        self.exchanges: dict[str, GroupExchange] = {}
        self.step_errors: list[str] = []
        self.facts = GroupFacts()
        self.host, self.port = cluster.endpoints[NODE_ID]
        self.bootstrap: str = cluster.bootstrap_servers
        self._golden: RawKafkaClient | None = None

    def now_ms(self) -> int:
        return int(self.cluster.clock.now_ms())

    def step(self, name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            self.step_errors.append(f"step {name!r} failed:\n{traceback.format_exc(limit=6)}")

    def decoded(self, file: str) -> Any:
        ex = self.exchanges.get(file)
        if ex is None or ex.response is None:
            return None
        cap = self.captures[file]
        assert cap.api_key is not None
        cls = response_class(cap.api_key, cap.response_version)
        return cls.decode(ex.response, version=cap.response_version, header=True)

    def run(self) -> None:
        f = self.facts
        b = self.bootstrap
        # SimCluster.create_topic, or a live broker's (conformance/live.py LiveBroker).
        self.cluster.create_topic(COMPACTED, 1, 1, COMPACTED_CONFIGS)

        def first() -> None:
            f.first_txn = committed_transaction(
                b, "grp-commit-1", TOPIC, {0: 5}, now_ms=self.now_ms
            )
            self._until_complete("grp-commit-1", f.first_txn)

        def hang() -> None:
            made_at_ms = self.now_ms()
            f.hang_timestamp_ms = made_at_ms - HANG_BACKDATE_MS
            f.hang = hanging_transaction(
                b, "grp-hang", TOPIC, 0, backdate_ms=HANG_BACKDATE_MS, now_ms=lambda: made_at_ms
            )

        def second() -> None:
            f.second_txn = committed_transaction(
                b, "grp-commit-2", TOPIC, {0: 3}, now_ms=self.now_ms
            )
            self._until_complete("grp-commit-2", f.second_txn)

        def groups() -> None:
            for group, isolation in (("grp-rc", READ_COMMITTED), ("grp-ru", READ_UNCOMMITTED)):
                f.consumed[group] = consume_and_commit(
                    b, group, TOPIC, 0, isolation_level=isolation
                )
            commit_offset(b, "grp-lagging", TOPIC, 0, LAGGING_OFFSET)

        self.step("producer 0 commits 5 records to grp-test-0", first)
        self.step("grp-hang (producer 1): a hanging transaction at offset 6", hang)
        self.step("producer 2 commits 3 records to grp-test-0", second)
        self.step(
            "an idempotent record on grp-compacted",
            lambda: idempotent_producer_write(b, COMPACTED, 0, now_ms=self.now_ms),
        )
        self.step("grp-rc, grp-ru and grp-lagging commit without membership", groups)

        def markers() -> None:
            for batch in control_batches(self.cluster, TOPIC, 0):
                f.marker_timestamps[int(batch["producer_id"])] = int(batch["max_timestamp"])

        self.step("read the COMMIT markers' timestamps on grp-test-0", markers)
        for file, cap in self.captures.items():
            if cap.is_exchange:
                self._send(file, cap)
        self._close()

    def _until_complete(self, transactional_id: str, txn: TransactionResult | None) -> None:
        """A real broker writes the COMMIT marker after EndTxn has answered: wait for it, so the
        next producer's batch lands after the marker (offset 6), as in the capture. Before 3.0
        (no DescribeTransactions) the marker itself is looked for in the partition."""
        if txn is not None and not offers(self.cluster, DESCRIBE_TRANSACTIONS):
            written = wait_until(
                lambda: marker_written(self.cluster, TOPIC, 0, txn.producer_id), bool, 60.0
            )
            if not written:
                raise RuntimeError(f"no COMMIT marker of {transactional_id} on {TOPIC}-0")
            return
        wait_until(
            lambda: describe_transaction(self.cluster, transactional_id).transaction_state,
            lambda state: state == "CompleteCommit",
        )

    def _close(self) -> None:
        if self._golden is not None:
            self._golden.close()
            self._golden = None

    def _send(self, file: str, cap: Capture) -> None:
        """One captured request, verbatim, on the golden connection (reopened after a failure,
        so one unanswered request does not take the later ones with it)."""
        ex = GroupExchange(file)
        self.exchanges[file] = ex
        try:
            if self._golden is None:
                self._golden = RawKafkaClient(self.host, self.port, client_id="golden-capture")
            self._golden.send_raw(cap.request_bytes)
            ex.response = self._golden.receive_raw()
        except ConnectionClosedError as exc:
            ex.error = f"connection closed: {exc!r}"
            self._close()
        except Exception:
            ex.error = traceback.format_exc(limit=6)
            self._close()
