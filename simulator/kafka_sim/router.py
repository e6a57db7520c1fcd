"""The brokers' request router: a decoded request goes to its API's handler.

`BrokerRouter` is the `kafka_sim.api.Dispatcher` the network layer talks to. It keeps the
routing apart from `ClusterState` (the data) so that `handlers` depends on `state` and nothing
depends back: router -> handlers -> state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_sim.api import RequestContext
from kafka_sim.handlers import HANDLERS
from kafka_sim.state import ClusterState


class BrokerRouter:
    """Answers each request as the broker it reached (`ctx.broker_id`), from one cluster state."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        return self.state.profile_for(broker_id).api_versions

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        handler = HANDLERS.get(ctx.api_key)
        if handler is None:
            raise NotImplementedError(f"API {ctx.api_key} is not simulated")
        return handler(self.state, ctx, request)
