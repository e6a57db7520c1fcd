"""The demo's live churn: committed, aborted and long-running transactions on a thread."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_sim.producer import (
    OpenTransaction,
    aborted_transaction,
    committed_transaction,
    open_transaction,
)

__all__ = ["Workload", "WorkloadStats"]


@dataclass(slots=True)
class WorkloadStats:
    committed: int = 0
    aborted: int = 0
    long_running_started: int = 0
    long_running_finished: int = 0
    errors: int = 0
    last_error: str | None = None


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
    ) -> None:
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

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for _, txn in self._open:
            try:
                txn.commit()
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
            item[1].commit()
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
            aborted_transaction(self.bootstrap, txn_id, self.topic, [partition], **common)
            self.stats.aborted += 1
        else:
            txn_id = f"{self.id_prefix}-commit-{n % 16}"
            committed_transaction(self.bootstrap, txn_id, self.topic, [partition], **common)
            self.stats.committed += 1
