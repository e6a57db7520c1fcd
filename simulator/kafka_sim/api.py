"""The seam between the simulator's network layer and its brokers' logic.

The network layer (`server.py`) owns sockets, framing, headers, TLS, SASL, ApiVersions and
injected network faults. Everything a request means is decided by a `Dispatcher`
(`router.BrokerRouter` over a `state.ClusterState`), which runs on the simulator's single
event-loop thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker_id: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    principal: str  # "User:ANONYMOUS" or "User:<sasl username>"


class Dispatcher(Protocol):
    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        """api_key -> (min, max) this broker answers (its ApiVersions answer)."""
        ...

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        """Answer one decoded request with a response message (kafka-python ApiMessage).

        None means the request gets no response (Produce with acks=0).
        """
        ...
