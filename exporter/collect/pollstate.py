"""What the phases of one poll share: the poll's scratch record and the once-per-broker log
of APIs a broker lacks. No Kafka I/O here."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.logs import get_logger
from exporter.model import PollPhase, ProducerEntry, RequestError, TopicPartition

log = get_logger()
T = TypeVar("T")

UNSUPPORTED_API_KIND = "UNSUPPORTED_VERSION"
"""`CollectError.kind` when the broker does not offer an API at all (it predates it)."""
RETRY_DELAY_SECONDS = 0.05
# What each API needs, for the once-per-broker log line when a broker lacks it.
_SINCE_KAFKA = {
    "DescribeProducers": "2.8",
    "ListTransactions": "3.0",
    "DescribeTransactions": "3.0",
    "DescribeCluster": "2.8",
    "Fetch sessions": "1.1",
}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class PollState:
    """Mutable scratch space for one poll."""

    now_ms: int
    unobserved: dict[TopicPartition, str] = field(default_factory=dict)
    request_errors: list[RequestError] = field(default_factory=list)
    open_entries: list[ProducerEntry] = field(default_factory=list)
    """DescribeProducers entries with an open transaction, before their start times."""
    unobservable_brokers: set[int] = field(default_factory=set)
    """Brokers up but without DescribeProducers: their partitions are unobserved."""
    unsupported_apis: set[str] = field(default_factory=set)
    """Coordinator-side APIs some broker of this poll does not offer (Kafka before 3.0)."""

    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each phase the poll reached (`ClusterObservation.poll_phase_seconds`)."""

    def error(self, broker_id: int, api: str, error: str) -> None:
        self.request_errors.append(RequestError(broker_id, api, error))

    async def timed(self, phase: PollPhase, step: Awaitable[T]) -> T:
        """Await `step`, recording its wall time (time.monotonic) as `phase`'s, also when it
        raises (it ran). Concurrent phases each get their own wall time."""
        started = time.monotonic()
        try:
            return await step
        finally:
            self.phase_seconds[phase.value] = time.monotonic() - started


class ApiSupportLog:
    """One log line per broker and API a broker lacks, not one per poll: this is the broker's
    release, not a failure (no request error is counted)."""

    def __init__(self, cluster: str) -> None:
        self._cluster = cluster
        self._logged: set[tuple[int, str]] = set()

    def unsupported(self, broker_id: int, api: str) -> None:
        if (broker_id, api) in self._logged:
            return
        self._logged.add((broker_id, api))
        log.warning(
            "api_not_supported_by_broker",
            cluster=self._cluster,
            broker_id=broker_id,
            api=api,
            hint=f"{api} needs Kafka {_SINCE_KAFKA.get(api, '?')} or later on this broker",
        )

    def supported(self, broker_id: int, api: str) -> None:
        """The broker offers it again (upgraded): log again if it ever stops."""
        self._logged.discard((broker_id, api))

    def __len__(self) -> int:
        return len(self._logged)
