"""Which errors make the next poll ask Metadata again (`collect.metadata_age`, pure)."""

from __future__ import annotations

import pytest

from exporter.collect.metadata_age import MetadataRefresh, refresh_reason, stale_after
from exporter.model import RequestError


@pytest.mark.parametrize(("error", "reason"), [
    ("NOT_LEADER_OR_FOLLOWER", MetadataRefresh.LEADER_CHANGED),
    ("FENCED_LEADER_EPOCH", MetadataRefresh.LEADER_CHANGED),
    ("UNKNOWN_LEADER_EPOCH", MetadataRefresh.LEADER_CHANGED),
    ("UNKNOWN_TOPIC_OR_PARTITION", MetadataRefresh.UNKNOWN_PARTITION),
    ("UNKNOWN_TOPIC_ID", MetadataRefresh.UNKNOWN_PARTITION),
    ("BROKER_UNREACHABLE", MetadataRefresh.BROKER_FAILED),
    ("REQUEST_TIMEOUT", MetadataRefresh.BROKER_FAILED),
    ("NOT_COORDINATOR", MetadataRefresh.COORDINATOR_MOVED),
    ("MISSING_FROM_ANSWER", MetadataRefresh.REQUEST_ERROR),
    ("INCONSISTENT_ANSWER", MetadataRefresh.REQUEST_ERROR),
])
def test_an_error_that_may_mean_a_change_asks_metadata_again(
    error: str, reason: MetadataRefresh
) -> None:
    errors = [RequestError(1, "Fetch", error)]
    assert stale_after(errors, leaderless=False, broker_missing=False) is reason


@pytest.mark.parametrize("error", [
    "TOPIC_AUTHORIZATION_FAILED", "UNSUPPORTED_VERSION", "ANSWER_TOO_LARGE",
    "FETCH_SESSION_ID_NOT_FOUND",
])
def test_an_error_unrelated_to_where_partitions_live_does_not(error: str) -> None:
    errors = [RequestError(1, "DescribeProducers", error)]
    assert stale_after(errors, leaderless=False, broker_missing=False) is None


def test_leaderless_partitions_and_missing_brokers_ask_metadata_again() -> None:
    assert stale_after([], leaderless=True, broker_missing=False) is MetadataRefresh.LEADERLESS
    assert (stale_after([], leaderless=False, broker_missing=True)
            is MetadataRefresh.BROKER_MISSING)
    assert stale_after([], leaderless=False, broker_missing=False) is None


def test_the_age_bounds_reuse() -> None:
    assert refresh_reason(None, 299.9, 300.0) is None
    assert refresh_reason(None, 300.0, 300.0) is MetadataRefresh.MAX_AGE
    assert refresh_reason(None, 0.0, 0.0) is MetadataRefresh.MAX_AGE  # 0: every poll
    assert (refresh_reason(MetadataRefresh.LEADER_CHANGED, 1.0, 300.0)
            is MetadataRefresh.LEADER_CHANGED)
