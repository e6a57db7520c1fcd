"""Injected network faults for the simulated brokers.

Each fault is something a client can meet on a real cluster: a slow broker or a slow API
(latency), a broker whose process dies while writing (truncated frame then FIN, or partial frame
then RST), and a response the client cannot decode (malformed). The rules live on the
simulator's event-loop thread; `SimCluster` mutates them through its thread-safe `call`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

FaultKind = Literal["truncate", "malformed", "reset"]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)


@dataclass(slots=True)
class _ResponseFault:
    kind: FaultKind
    broker_id: int | None
    api_key: int | None
    remaining: int | None  # None: until cleared

    def matches(self, broker_id: int, api_key: int) -> bool:
        return (self.broker_id is None or self.broker_id == broker_id) and (
            self.api_key is None or self.api_key == api_key
        )


class NetworkFaults:
    """Latency and response-fault rules, matched by broker id and API key (None = any)."""

    def __init__(self) -> None:
        self._latency_ms: dict[tuple[int | None, int | None], int] = {}
        self._response_faults: list[_ResponseFault] = []

    def set_latency(
        self, ms: int, broker_id: int | None = None, api_key: int | None = None
    ) -> None:
        """Delay responses by `ms` (0 removes the rule). Matching rules add up."""
        if ms < 0:
            raise ValueError(f"latency must be >= 0 ms, got {ms}")
        key = (broker_id, api_key)
        if ms == 0:
            self._latency_ms.pop(key, None)
        else:
            self._latency_ms[key] = ms

    def latency_ms(self, broker_id: int, api_key: int) -> int:
        return sum(
            ms
            for (rule_broker, rule_api), ms in self._latency_ms.items()
            if (rule_broker is None or rule_broker == broker_id)
            and (rule_api is None or rule_api == api_key)
        )

    def fail_next_responses(
        self,
        kind: FaultKind,
        broker_id: int | None = None,
        api_key: int | None = None,
        count: int | None = 1,
    ) -> None:
        """Spoil the next `count` matching responses (None: every one until cleared)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        if count is not None and count < 1:
            raise ValueError(f"count must be >= 1 or None, got {count}")
        self._response_faults.append(_ResponseFault(kind, broker_id, api_key, count))

    def take_response_fault(self, broker_id: int, api_key: int) -> FaultKind | None:
        """The fault for the response about to be sent, consuming one use of its rule."""
        for rule in self._response_faults:
            if rule.matches(broker_id, api_key):
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._response_faults.remove(rule)
                return rule.kind
        return None

    def clear(self) -> None:
        self._latency_ms.clear()
        self._response_faults.clear()
