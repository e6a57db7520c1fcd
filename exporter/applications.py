"""Who owns a transaction: the application named by its transactional id (pure, no I/O).

Clients that make transactional ids for the user follow fixed shapes
(docs/kafka-semantics.md#applications): Kafka Streams exactly_once_v2
`<application.id>-<process UUID>-<thread index>`, Kafka Streams' older per-task form
`<application.id>-<subtopology>_<partition>`, Flink's KafkaSink
`<transactionalIdPrefix>-<subtask>-<checkpoint>`. User patterns (regexes with a named group
`application`) are tried first. The label value is one per application, never per
transaction; when nothing matches it is `UNMATCHED` (""), and past a cluster's
`max_applications` distinct values in one poll the rest share `OVERFLOW`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

APPLICATION_GROUP = "application"
UNMATCHED = ""
"""No pattern matched (or no transactional id maps to the producer): as `transactional_id`'s
empty value, so an Alertmanager route on `application=""` catches the unattributed."""
OVERFLOW = "_overflow"
"""Every application past the cluster's `max_applications` in one poll."""

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    # Most specific first: a Streams v2 id whose UUID ends in digits also has Flink's shape.
    ("kafka_streams_eos_v2", rf"^(?P<application>.+)-{_UUID}-\d+$"),
    ("kafka_streams_per_task", r"^(?P<application>.+)-\d+_\d+$"),
    ("flink_kafka_sink", r"^(?P<application>.+)-\d+-\d+$"),
)
"""(name, regex) of the transactional-id shapes of clients that build them for the user."""


class PatternError(ValueError):
    """A user pattern that does not compile or has no named group `application`."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A user pattern, checked: it compiles and has the named group `application`."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"not a valid regular expression ({exc.msg})") from None
    if APPLICATION_GROUP not in compiled.groupindex:
        raise PatternError("needs a named group (?P<application>...)")
    return compiled


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(
        [compile_pattern(p) for p in patterns]
        + [re.compile(regex) for _, regex in BUILTIN_PATTERNS]
    )


def application_of(transactional_id: str, patterns: tuple[str, ...] = ()) -> str:
    """The application a transactional id belongs to: the `application` group of the first
    pattern (user patterns, then the built-in ones) that matches the whole id with a non-empty
    group; `UNMATCHED` otherwise."""
    if not transactional_id:
        return UNMATCHED
    for compiled in _compiled(patterns):
        match = compiled.fullmatch(transactional_id)
        if match is not None:
            name = match.group(APPLICATION_GROUP)
            if name:
                return name
    return UNMATCHED


def capped(names: Iterable[str], limit: int) -> tuple[dict[str, str], int]:
    """The label value of each application name, at most `limit` distinct ones besides
    `UNMATCHED` (kept in name order, so the same set keeps the same values poll after poll),
    the rest mapped to `OVERFLOW`; and how many distinct names overflowed."""
    distinct = sorted({n for n in names if n != UNMATCHED})
    values = {n: (n if i < limit else OVERFLOW) for i, n in enumerate(distinct)}
    values[UNMATCHED] = UNMATCHED
    return values, max(0, len(distinct) - limit)


def applications_by_id(
    transactional_ids: Iterable[str], patterns: Sequence[str], limit: int
) -> tuple[Mapping[str, str], int]:
    """transactional id -> its `application` label value (capped), and the overflow count."""
    raw = {tid: application_of(tid, tuple(patterns)) for tid in set(transactional_ids)}
    values, overflowed = capped(raw.values(), limit)
    return {tid: values[name] for tid, name in raw.items()}, overflowed
