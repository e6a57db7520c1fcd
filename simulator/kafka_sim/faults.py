"""Injected network faults for the simulated brokers.

Each fault is something a client can meet on a real cluster: a slow broker or a slow API
(latency), a broker whose process dies while writing (truncated frame then FIN, or partial frame
then RST), a response the client cannot decode (malformed), a frame whose size prefix claims
2 GiB (oversized: a corrupted prefix, or a proxy in the middle gone wrong), and a well-formed
answer that contradicts the request (rewritten: a buggy broker). The rules live on the
simulator's event-loop thread; `SimCluster` mutates them through its thread-safe `call`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

FaultKind = Literal["truncate", "malformed", "reset", "oversized"]
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
        self._omissions: list[_Omission] = []
        self._rewrites: list[_Rewrite] = []

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

    def omit_from_responses(
        self,
        seed: int,
        probability: float = 0.3,
        broker_id: int | None = None,
        api_key: int | None = None,
        count: int | None = None,
        keep: frozenset[str] = frozenset(),
    ) -> None:
        """Leave random elements out of the next `count` matching answers (None: until
        cleared): each element of each array in the answer, at any depth, is dropped with
        `probability`, drawn from `seed`, except the arrays named in `keep` (dotted field
        paths such as "topics.partitions"). What a broken broker or a proxy in the middle may
        send; the answer stays well-formed."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {probability}")
        self._omissions.append(
            _Omission(random.Random(seed), probability, broker_id, api_key, count, keep)
        )

    def take_omission(self, broker_id: int, api_key: int) -> _Omission | None:
        for rule in self._omissions:
            if (rule.broker_id is None or rule.broker_id == broker_id) and (
                rule.api_key is None or rule.api_key == api_key
            ):
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._omissions.remove(rule)
                return rule
        return None

    def rewrite_responses(
        self,
        rewrite: Callable[[Any], None],
        broker_id: int | None = None,
        api_key: int | None = None,
        count: int | None = 1,
    ) -> None:
        """Pass the next `count` matching answers (None: until cleared) through `rewrite`,
        which changes a decoded copy in place (a partition listed twice, another session id,
        ...): the answer stays well-formed, its content is what a buggy broker may send."""
        if count is not None and count < 1:
            raise ValueError(f"count must be >= 1 or None, got {count}")
        self._rewrites.append(_Rewrite(rewrite, broker_id, api_key, count))

    def take_rewrite(self, broker_id: int, api_key: int) -> _Rewrite | None:
        for rule in self._rewrites:
            if (rule.broker_id is None or rule.broker_id == broker_id) and (
                rule.api_key is None or rule.api_key == api_key
            ):
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._rewrites.remove(rule)
                return rule
        return None

    def clear(self) -> None:
        self._latency_ms.clear()
        self._response_faults.clear()
        self._omissions.clear()
        self._rewrites.clear()


def _decoded_copy(response: Any, version: int) -> Any:
    """The answer decoded afresh from its bytes (the simulator's own objects never touched)."""
    message_class = getattr(response, "_message_class", None) or type(response)
    message = message_class.decode(bytes(response.encode(version=version)), version=version)
    try:
        message._header  # noqa: B018 - decoded without one: encode() reads it
    except AttributeError:
        message._header = None
    return message


@dataclass(slots=True)
class _Rewrite:
    rewrite: Callable[[Any], None]
    broker_id: int | None
    api_key: int | None
    remaining: int | None

    def apply(self, response: Any, version: int) -> bytes:
        message = _decoded_copy(response, version)
        self.rewrite(message)
        return bytes(message.encode(version=version))


@dataclass(slots=True)
class _Omission:
    rng: random.Random
    probability: float
    broker_id: int | None
    api_key: int | None
    remaining: int | None
    keep: frozenset[str]

    def apply(self, response: Any, version: int) -> bytes:
        """The answer's body with random array elements left out (decoded afresh, so the
        simulator's own objects are never touched)."""
        message = _decoded_copy(response, version)
        self._drop(message, version, "")
        return bytes(message.encode(version=version))

    def _drop(self, container: Any, version: int, path: str) -> None:
        struct = getattr(container, "_struct", None)
        if struct is None:
            return
        for name, field_spec in struct.fields.items():
            if not field_spec.for_version_q(version):
                continue
            value = getattr(container, name, None)
            here = f"{path}.{name}" if path else name
            if isinstance(value, list):
                kept = value if here in self.keep else [
                    v for v in value if self.rng.random() >= self.probability
                ]
                setattr(container, name, kept)
                for item in kept:
                    self._drop(item, version, here)
            elif getattr(value, "_struct", None) is not None:
                self._drop(value, version, here)
