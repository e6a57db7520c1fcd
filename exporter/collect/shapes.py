"""Shape checks of decoded responses: the fields the exporter reads have the right types.

Why: kafka-python's decoder accepts a null (length -1 / compact 0) for any string or array,
nullable in the schema or not, and does not range-check anything. A broker never sends null
where Kafka's schema forbids it, but a corrupted, truncated-then-padded or hostile answer can
decode "successfully" into `None` where a list or a name is expected. Unchecked, that raised
TypeError out of the poll (the whole cluster reported down) or reached a metric label and made
every /metrics scrape fail until the next poll (found by tests/resilience/test_resilience_fuzz).
Checked here, it is a `DecodeError` of that one request, counted like any other.

Only the fields the exporter reads are checked, and only those that can decode as `None`:
strings, arrays and bytes. Fixed-width integers and UUIDs always decode to their type, so they
are not looked at (that keeps the check at one isinstance per partition of a 200k-partition
answer). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Spec = Mapping[str, Any]
"""field -> a type, a tuple of types, [type] (a list of scalars) or [Spec] (a list of structs)."""

_NONE = type(None)
_BYTES = (bytes, bytearray, memoryview)

_SPECS: dict[int, Spec] = {
    # Fetch: only the first batch's header is read (records nullable in the schema).
    1: {"responses": [{"partitions": [{"records": (*_BYTES, _NONE)}]}]},
    2: {"topics": [{"name": str, "partitions": list}]},
    3: {"brokers": [{"host": str}],
        "topics": [{"name": (str, _NONE), "partitions": [{"replica_nodes": list}]}]},
    # OffsetFetch: the exporter asks v8+ only (many groups).
    9: {"groups": [{"group_id": str,
                    "topics": [{"name": str, "partitions": list}]}]},
    16: {"groups": [{"group_id": str, "protocol_type": str}]},
    17: {"mechanisms": [str]},
    18: {"api_keys": list},
    32: {"results": [{"configs": [{"name": str, "value": (str, _NONE)}]}]},
    36: {"error_message": (str, _NONE), "auth_bytes": _BYTES},
    61: {"topics": [{"name": str, "partitions": [{"active_producers": list}]}]},
    65: {"transaction_states": [{"transactional_id": str, "transaction_state": str,
                                 "topics": [{"topic": str, "partitions": list}]}]},
    66: {"transaction_states": [{"transactional_id": str, "transaction_state": str}]},
}
_FIND_COORDINATOR_V4: Spec = {"coordinators": [{"key": str}]}
FIND_COORDINATOR = 10
_MISSING = object()


class ShapeError(ValueError):
    """A decoded response whose field has a type Kafka's schema never allows there."""


Check = Callable[[Any], "str | None"]
"""Returns the path of the first bad field, or None."""


def _compile(spec: Spec) -> Check:
    """Closures per field: the per-partition loop does no dict iteration or string work."""
    checks: list[Check] = []
    for name, kind in spec.items():
        if isinstance(kind, list) and isinstance(kind[0], Mapping):
            checks.append(_struct_list(name, _compile(kind[0])))
        elif isinstance(kind, list):
            checks.append(_scalar_list(name, kind[0]))
        else:
            checks.append(_field(name, kind))
    if len(checks) == 1:
        return checks[0]

    def check_all(obj: Any) -> str | None:
        for check in checks:
            bad = check(obj)
            if bad is not None:
                return bad
        return None

    return check_all


def _field(name: str, kind: Any) -> Check:
    def check(obj: Any) -> str | None:
        return None if isinstance(getattr(obj, name, _MISSING), kind) else name

    return check


def _scalar_list(name: str, item: Any) -> Check:
    def check(obj: Any) -> str | None:
        value = getattr(obj, name, _MISSING)
        if not isinstance(value, list):
            return name
        for element in value:
            if not isinstance(element, item):
                return f"{name}[]"
        return None

    return check


def _struct_list(name: str, item_check: Check) -> Check:
    def check(obj: Any) -> str | None:
        value = getattr(obj, name, _MISSING)
        if not isinstance(value, list):
            return name
        for element in value:
            bad = item_check(element)
            if bad is not None:
                return f"{name}[].{bad}"
        return None

    return check


_CHECKS: dict[int, Check] = {api_key: _compile(spec) for api_key, spec in _SPECS.items()}
_CHECK_FIND_COORDINATOR_V4 = _compile(_FIND_COORDINATOR_V4)


def check_response(response: Any, api_key: int, version: int) -> None:
    """Raise ShapeError naming the first bad field; APIs without a spec pass."""
    if api_key == FIND_COORDINATOR:
        if version < 4:
            return  # integers only
        check: Check | None = _CHECK_FIND_COORDINATOR_V4
    else:
        check = _CHECKS.get(api_key)
    if check is None:
        return
    bad = check(response)
    if bad is not None:
        raise ShapeError(f"{bad}: null or wrong type where Kafka's schema allows none")
