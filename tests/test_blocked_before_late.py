"""Pure parts of "blocked before late" and "who owns it": which open transactions get their
blocked groups read and how they are classified (analyze), the application a transactional id
names and its cap (exporter.applications), and the settings that tune both (config).
docs/kafka-semantics.md#blocked-before-late, #applications."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_analyze import (
    GROUP_TP,
    MINUTE_MS,
    NOW_MS,
    SETTINGS,
    description,
    groups_obs,
    txn,
)

from exporter.analyze import analyze, blocking_classification
from exporter.applications import (
    OVERFLOW,
    UNMATCHED,
    PatternError,
    application_of,
    applications_by_id,
    capped,
    compile_pattern,
)
from exporter.config import ConfigError, load_settings
from exporter.model import Classification, TransactionDescription
from exporter.rules import TWO_PHASE_TRANSACTION_TIMEOUT_MS

STREAMS_V2 = "orders-enricher-3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f809a1b-2"
STREAMS_PER_TASK = "orders-enricher-0_12"
FLINK = "clicks-sink-3-118"


# -- the application of a transactional id ---------------------------------------------------


@pytest.mark.parametrize(
    ("transactional_id", "application"),
    [
        (STREAMS_V2, "orders-enricher"),
        # A UUID whose last group is all digits still reads as Streams, not as Flink.
        ("app-3f2b8c1e-9d4a-4e7b-a1c2-123456789012-1", "app"),
        (STREAMS_PER_TASK, "orders-enricher"),
        (FLINK, "clicks-sink"),
        ("kafka-sink-7-0", "kafka-sink"),
        ("plain-producer", UNMATCHED),
        ("orders-3", UNMATCHED),  # one number is neither shape
        ("", UNMATCHED),
        ("-1-2", UNMATCHED),  # the shape with an empty application is no application
    ],
)
def test_builtin_shapes_name_the_application(transactional_id: str, application: str) -> None:
    assert application_of(transactional_id) == application


def test_user_patterns_come_first_and_in_order() -> None:
    patterns = (r"payments\.(?P<application>[a-z-]+)\.\d+", r"(?P<application>clicks)-.*")
    assert application_of("payments.ledger-writer.4", patterns) == "ledger-writer"
    assert application_of(FLINK, patterns) == "clicks"  # before the built-in Flink shape
    assert application_of("kafka-sink-7-0", patterns) == "kafka-sink"  # built-in still applies
    # The whole id must match: a pattern matching a prefix only does not count.
    assert application_of("payments.ledger-writer.4x", patterns) == UNMATCHED


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("(unclosed", "not a valid regular expression"),
     (r"payments\.\w+", "needs a named group (?P<application>...)")],
)
def test_bad_user_patterns_are_refused(pattern: str, message: str) -> None:
    with pytest.raises(PatternError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("?", r"\?").replace(".", r"\.")):
        compile_pattern(pattern)


def test_the_cap_keeps_the_first_names_in_order_and_counts_the_rest() -> None:
    values, overflowed = capped(["c", "a", "b", "a", UNMATCHED, "d"], 2)
    assert values == {"a": "a", "b": "b", "c": OVERFLOW, "d": OVERFLOW, UNMATCHED: UNMATCHED}
    assert overflowed == 2
    assert capped(["a"], 2) == ({"a": "a", UNMATCHED: UNMATCHED}, 0)


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(1, 20))
def test_one_value_per_application_never_per_transaction(threads: list[int], limit: int) -> None:
    """However many transactions (thread indexes, checkpoints) an application has, it takes one
    value; the values in use never exceed the cap plus the unknown and overflow values."""
    ids = [f"app{t % 7}-{t}-{i}" for i, t in enumerate(threads)]
    by_id, overflowed = applications_by_id(ids, (), limit)
    values = set(by_id.values())
    names = {f"app{t % 7}" for t in threads}
    assert len(values - {OVERFLOW}) == min(limit, len(names))
    assert overflowed == max(0, len(names) - limit)


# -- which transactions get their blocked groups read, and as what -----------------------------


def lingering_obs(age_ms: int, **kwargs: object) -> tuple[object, object]:
    t = txn(age_ms=age_ms, start_offset=6)
    obs = groups_obs(t, committed=(("rc", 6, NOW_MS - MINUTE_MS),))
    obs = replace(obs, transactional_ids={7: FLINK},
                  descriptions={FLINK: description(FLINK, GROUP_TP)}, **kwargs)
    return t, obs


def test_a_tracked_transaction_past_the_minimum_age_blocks_as_coordinator_tracked() -> None:
    _, obs = lingering_obs(3 * MINUTE_MS)  # not late: 15 min + 5 min
    snap = analyze(obs, SETTINGS)
    assert snap.late_transactions == () and snap.orphaned_transactions == ()
    (b,) = snap.blocking_transactions
    assert (b.classification, b.late, b.application, b.transactional_id) == (
        Classification.COORDINATOR_TRACKED, False, "clicks-sink", FLINK)
    assert [g.group_id for g in b.blocked_groups] == ["rc"] and b.blocked_groups_unknown is None


def test_below_the_minimum_age_nothing_is_read_or_reported() -> None:
    t = txn(age_ms=int(SETTINGS.blocked_groups_min_age_seconds * 1000) - 1, start_offset=6)
    snap = analyze(groups_obs(t, looked_up=False), SETTINGS)
    assert snap.blocking_transactions == () and snap.blocked_groups_unknown_by_reason == {}


def test_the_minimum_age_is_inclusive_and_follows_the_setting() -> None:
    settings = replace(SETTINGS, blocked_groups_min_age_seconds=30.0)
    _, obs = lingering_obs(30_000)
    assert len(analyze(obs, settings).blocking_transactions) == 1
    _, obs = lingering_obs(29_999)
    assert analyze(obs, settings).blocking_transactions == ()


def test_old_enough_but_not_looked_up_is_unknown_never_none_blocked() -> None:
    t = txn(age_ms=3 * MINUTE_MS, start_offset=6)
    snap = analyze(groups_obs(t, looked_up=False), SETTINGS)
    (b,) = snap.blocking_transactions
    assert b.blocked_groups_unknown == "error" and snap.blocked_groups_unknown_by_reason == {
        "error": 1}


@pytest.mark.parametrize(
    ("answer", "late", "orphaned", "two_phase", "expected"),
    [
        (Classification.COORDINATOR_TRACKED, False, False, False,
         Classification.COORDINATOR_TRACKED),
        # One "not tracked" answer, not yet orphaned: unknown, never hanging.
        (Classification.HANGING, False, False, False, Classification.UNKNOWN),
        (Classification.UNKNOWN, False, False, False, Classification.UNKNOWN),
        (Classification.HANGING, False, True, False, Classification.ORPHANED),
        (Classification.COORDINATOR_TRACKED, False, False, True, Classification.TWO_PHASE),
        (Classification.HANGING, True, True, False, Classification.HANGING),
        (Classification.COORDINATOR_TRACKED, True, False, False,
         Classification.COORDINATOR_TRACKED),
        (Classification.UNKNOWN, True, False, False, Classification.UNKNOWN),
    ],
)
def test_blocking_classification(
    answer: Classification, late: bool, orphaned: bool, two_phase: bool,
    expected: Classification,
) -> None:
    assert blocking_classification(
        answer, late=late, orphaned=orphaned, two_phase=two_phase) is expected


def test_an_untracked_transaction_past_the_minimum_age_is_unknown_then_orphaned() -> None:
    t = txn(age_ms=3 * MINUTE_MS, start_offset=6)
    obs = groups_obs(t, committed=(("rc", 6, NOW_MS - MINUTE_MS),))
    once = analyze(replace(obs, untracked_polls={t.key: 1}), SETTINGS)
    assert [b.classification for b in once.blocking_transactions] == [Classification.UNKNOWN]
    twice = analyze(replace(obs, untracked_polls={t.key: 2}), SETTINGS)
    assert [b.classification for b in twice.blocking_transactions] == [Classification.ORPHANED]
    assert [g.group_id for g in twice.orphaned_transactions[0].blocked_groups] == ["rc"]


def test_a_late_transaction_keeps_its_late_classification_and_application() -> None:
    _, obs = lingering_obs(30 * MINUTE_MS)  # tracked, but past 15 min + 5 min
    snap = analyze(obs, SETTINGS)
    (late,) = snap.late_transactions
    (b,) = snap.blocking_transactions
    assert late.application == b.application == "clicks-sink"
    assert (b.classification, b.late) == (Classification.COORDINATOR_TRACKED, True)


def test_a_two_phase_transaction_is_looked_at_by_age_only() -> None:
    t = txn(age_ms=3 * MINUTE_MS, start_offset=6)
    two_phase = TransactionDescription(
        transactional_id=FLINK, state="Ongoing",
        transaction_timeout_ms=TWO_PHASE_TRANSACTION_TIMEOUT_MS,
        transaction_start_time_ms=NOW_MS - 3 * MINUTE_MS, producer_id=7, producer_epoch=0,
        topic_partitions=frozenset({GROUP_TP}),
    )
    obs = replace(groups_obs(t, committed=(("rc", 6, NOW_MS),)),
                  transactional_ids={7: FLINK}, descriptions={FLINK: two_phase})
    snap = analyze(obs, SETTINGS)
    assert [b.classification for b in snap.blocking_transactions] == [Classification.TWO_PHASE]
    assert snap.two_phase_transactions[0].application == "clicks-sink"
    young = replace(obs, open_transactions=(txn(age_ms=MINUTE_MS, start_offset=6),))
    assert analyze(young, SETTINGS).blocking_transactions == ()


def test_applications_past_the_cap_overflow_and_are_counted() -> None:
    txns = tuple(txn(partition=p, producer_id=100 + p, age_ms=30 * MINUTE_MS) for p in range(3))
    ids = {100: "alpha-0-1", 101: "beta-0-1", 102: "gamma-0-1"}
    obs = replace(groups_obs(*txns, looked_up=False), transactional_ids=ids)
    snap = analyze(obs, replace(SETTINGS, max_applications=2))
    assert sorted(lt.application for lt in snap.late_transactions) == [
        OVERFLOW, "alpha", "beta"]
    assert snap.applications_overflowed == 1


def test_an_application_not_reported_takes_no_slot() -> None:
    """A young transaction's id is not reported: it must not push a reported one over."""
    young = txn(partition=0, producer_id=100, age_ms=1_000)
    old = txn(partition=1, producer_id=101, age_ms=30 * MINUTE_MS)
    obs = replace(groups_obs(young, old, looked_up=False),
                  transactional_ids={100: "aaa-0-1", 101: "zzz-0-1"})
    snap = analyze(obs, replace(SETTINGS, max_applications=1))
    assert [lt.application for lt in snap.late_transactions] == ["zzz"]
    assert snap.applications_overflowed == 0


# -- configuration -----------------------------------------------------------------------------


def _load(tmp_path: Path, cluster_extra: str) -> object:
    path = tmp_path / "c.yaml"
    path.write_text(f"clusters: [{{name: a, bootstrap_servers: [h:1]{cluster_extra}}}]\n")
    return load_settings(str(path), env={})


def test_settings_are_read_with_their_defaults(tmp_path: Path) -> None:
    default = _load(tmp_path, "").clusters[0]  # type: ignore[attr-defined]
    assert (default.blocked_groups_min_age_seconds, default.application_patterns,
            default.max_applications) == (120.0, (), 100)
    tuned = _load(tmp_path, ", blocked_groups_min_age_seconds: 5m, max_applications: 7, "
                  "application_patterns: ['x-(?P<application>\\w+)']").clusters[0]  # type: ignore[attr-defined]
    assert (tuned.blocked_groups_min_age_seconds, tuned.application_patterns,
            tuned.max_applications) == (300.0, (r"x-(?P<application>\w+)",), 7)


def test_env_takes_one_pattern_per_line() -> None:
    settings = load_settings(None, env={
        "KTE_CLUSTER_NAME": "a", "KTE_CLUSTER_BOOTSTRAP_SERVERS": "h:1",
        "KTE_CLUSTER_APPLICATION_PATTERNS": "a-(?P<application>\\w+)\n\nb,(?P<application>\\w+)",
        "KTE_CLUSTER_BLOCKED_GROUPS_MIN_AGE_SECONDS": "90",
    })
    (cluster,) = settings.clusters
    assert cluster.application_patterns == (r"a-(?P<application>\w+)", r"b,(?P<application>\w+)")
    assert cluster.blocked_groups_min_age_seconds == 90.0


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (", application_patterns: ['(unclosed']",
         "clusters[0].application_patterns[0]: not a valid regular expression"),
        (", application_patterns: ['ok-(?P<application>x)', 'no-group-\\d+']",
         "clusters[0].application_patterns[1]: needs a named group (?P<application>...)"),
        (", application_patterns: 'x'", "clusters[0].application_patterns[0]: needs a named"),
        (", application_patterns: {a: b}", "clusters[0].application_patterns: expected a list"),
        (", blocked_groups_min_age_seconds: 0",
         "clusters[0].blocked_groups_min_age_seconds: must be between 1 and 604800 seconds"),
        (", max_applications: 0", "clusters[0].max_applications: must be between 1 and 10000"),
    ],
)
def test_bad_settings_name_the_field(tmp_path: Path, extra: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, extra)
    assert str(info.value).startswith(expected), str(info.value)


def test_a_bad_pattern_exits_2_with_one_line_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("clusters: [{name: a, bootstrap_servers: ['h:1'], "
                    "application_patterns: ['(?P<application>[a-']}]\n")
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "scan", "--config", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "clusters[0].application_patterns[0]" in lines[0], lines
    assert "Traceback" not in result.stderr
