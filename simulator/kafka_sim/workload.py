"""The demo's live churn: committed, aborted and long-running transactions on a thread, and
optionally a consumer group reading the same topic and committing its position."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from kafka_sim.consumer import READ_COMMITTED, in_process_client
from kafka_sim.producer import (
    OpenTransaction,
    aborted_transaction,
    committed_transaction,
    open_transaction,
)

__all__ = ["CommittingConsumer", "ConsumerStats", "Workload", "WorkloadStats"]


@dataclass(slots=True)
class WorkloadStats:
    committed: int = 0
    aborted: int = 0
    long_running_started: int = 0
    long_running_finished: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass(slots=True)
class ConsumerStats:
    records_read: int = 0
    commits: int = 0
    errors: int = 0
    last_error: str | None = None
    committed: dict[int, int] = field(default_factory=dict)
    """partition -> last committed offset."""


class CommittingConsumer:
    """A consumer group member that never joins: kafka-python's KafkaConsumer with `assign()`,
    reading on a thread and committing its positions every `commit_interval_s` (OffsetCommit,
    generation -1: docs/kafka-semantics.md#consumer-groups).

    With `read_committed` it reads only below each partition's last stable offset, so on a
    partition holding a hanging transaction its committed offset stops at the LSO while the
    high watermark moves on: the group is visibly blocked by the transaction.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        topic: str,
        partitions: Sequence[int],
        *,
        isolation_level: str = READ_COMMITTED,
        commit_interval_s: float = 2.0,
        client_id: str = "kafka-txn-sim-consumer",
    ) -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.topic = topic
        self.partitions = list(partitions)
        self.isolation_level = isolation_level
        self.commit_interval_s = commit_interval_s
        self.client_id = client_id
        self.stats = ConsumerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("consumer already started")
        self._thread = threading.Thread(target=self._run, name="sim-consumer", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
            except Exception as exc:  # the demo must survive broker faults: reconnect
                self.stats.errors += 1
                self.stats.last_error = repr(exc)
                self._stop.wait(1.0)

    def _consume(self) -> None:
        consumer = KafkaConsumer(
            kafka_client=in_process_client,  # no slow-step warnings from GIL waits
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=self.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=self.isolation_level,
        )
        try:
            tps = [TopicPartition(self.topic, p) for p in self.partitions]
            consumer.assign(tps)
            next_commit = time.monotonic() + self.commit_interval_s
            while not self._stop.is_set():
                batches = consumer.poll(timeout_ms=200)
                self.stats.records_read += sum(len(v) for v in batches.values())
                if time.monotonic() >= next_commit:
                    consumer.commit()
                    self.stats.commits += 1
                    self.stats.committed = {tp.partition: consumer.position(tp) for tp in tps}
                    next_commit = time.monotonic() + self.commit_interval_s
        finally:
            consumer.close(autocommit=False)


class Workload:
    """Committed, aborted and long-running transactions at a configurable rate, on a thread.

    Long-running transactions stay open for `long_running_ms` (then commit), so the exporter
    sees open transactions of growing age. `stop()` joins the thread and ends what is open.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        partitions: Sequence[int] = (0,),
        *,
        transactions_per_second: float = 5.0,
        abort_ratio: float = 0.2,
        long_running_ratio: float = 0.1,
        long_running_ms: int = 30000,
        max_open_long_running: int = 3,
        transaction_timeout_ms: int = 60000,
        id_prefix: str = "workload",
        seed: int | None = None,
        now_ms: Callable[[], int] | None = None,
        consumer_group: str | None = None,
    ) -> None:
        """`consumer_group`: also run a read_committed `CommittingConsumer` of that group on
        the workload's partitions, started and stopped with it."""
        if transactions_per_second <= 0:
            raise ValueError("transactions_per_second must be > 0")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = list(partitions)
        self.interval_s = 1.0 / transactions_per_second
        self.abort_ratio = abort_ratio
        self.long_running_ratio = long_running_ratio
        self.long_running_ms = long_running_ms
        self.max_open_long_running = max_open_long_running
        self.transaction_timeout_ms = transaction_timeout_ms
        self.id_prefix = id_prefix
        self.stats = WorkloadStats()
        self._rng = random.Random(seed)
        self._now_ms = now_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open: list[tuple[float, OpenTransaction]] = []
        self._ids = itertools.count()
        self.consumer: CommittingConsumer | None = (
            None
            if consumer_group is None
            else CommittingConsumer(bootstrap, consumer_group, topic, self.partitions)
        )

    def __enter__(self) -> Workload:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("workload already started")
        self._thread = threading.Thread(target=self._run, name="sim-workload", daemon=True)
        self._thread.start()
        if self.consumer is not None:
            self.consumer.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self.consumer is not None:
            self.consumer.stop(timeout_s)
        if self._thread is not None:
            self._thread.join(timeout_s)
        for _, txn in self._open:
            try:
                txn.commit(wait_for_markers=False)
            except Exception:  # the cluster may already be gone at shutdown
                txn.close_quietly()
        self._open.clear()

    @property
    def open_transactions(self) -> int:
        return len(self._open)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception as exc:  # keep churning; the demo must survive broker faults
                self.stats.errors += 1
                self.stats.last_error = repr(exc)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def step(self) -> None:
        """One unit of work: finish due long-running transactions, then start one more."""
        now = time.monotonic()
        due = [item for item in self._open if item[0] <= now]
        for item in due:
            self._open.remove(item)
            item[1].commit(wait_for_markers=False)
            self.stats.long_running_finished += 1
        n = next(self._ids)
        partition = self._rng.choice(self.partitions)
        roll = self._rng.random()
        common: dict[str, Any] = {
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "now_ms": self._now_ms,
        }
        if roll < self.long_running_ratio and len(self._open) < self.max_open_long_running:
            txn = open_transaction(
                self.bootstrap, f"{self.id_prefix}-long-{n}", self.topic, [partition], **common
            )
            self._open.append((now + self.long_running_ms / 1000.0, txn))
            self.stats.long_running_started += 1
        elif roll < self.long_running_ratio + self.abort_ratio:
            txn_id = f"{self.id_prefix}-abort-{n % 16}"
            aborted_transaction(self.bootstrap, txn_id, self.topic, [partition], **common,
                                wait_for_markers=False)
            self.stats.aborted += 1
        else:
            txn_id = f"{self.id_prefix}-commit-{n % 16}"
            committed_transaction(self.bootstrap, txn_id, self.topic, [partition], **common,
                                  wait_for_markers=False)
            self.stats.committed += 1
