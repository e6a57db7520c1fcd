"""Blocked consumer groups, end to end against the simulator.

The scenario is the groups capture's (tests/data/real-kafka-4.0-groups/README.md) on three
brokers: on grp-test-0 a committed transaction, a hanging one (backdated 1 h: late on the first
poll), a committed one after it; then grp-rc (read_committed) stops at the LSO, grp-ru
(read_uncommitted) reaches the high watermark and grp-lagging commits offset 2. Only grp-rc is
blocked (docs/kafka-semantics.md#blocked-groups). Requests are counted where the brokers see
them (the simulator's router), so "no group request without a late transaction" is checked on
the wire.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from kafka_sim.cluster import SimCluster
from kafka_sim.consumer import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    commit_offset,
    consume_and_commit,
)
from kafka_sim.producer import committed_transaction, hanging_transaction, open_transaction
from kafka_sim.workload import Workload
from simhelpers import CAPTURE_BROKER_CONFIG, cluster_settings, poll_env

from exporter.collect import groups as groups_module
from exporter.demo import DEMO_CONSUMER_GROUP, HANGING_PARTITIONS, HANGING_TOPIC
from exporter.expose.collector import SnapshotCollector
from exporter.model import ClusterSnapshot, UnobservedReason
from exporter.scan import EXIT_HANGING, run_scan
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

TOPIC = "grp-test"
QUIET_TOPIC = "quiet"
HANG_BACKDATE_MS = 3_600_000
LAGGING_OFFSET = 2
LIST_GROUPS, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_CLUSTER = 16, 9, 10, 60
PRINCIPAL = "User:ANONYMOUS"


class RequestLog:
    """Counts the requests the brokers answer, by API key (and FindCoordinator key type)."""

    def __init__(self, sim: SimCluster) -> None:
        self.counts: Counter[tuple[int, int | None]] = Counter()
        router = sim.router
        handle = router.handle

        def counting(ctx: Any, request: Any) -> Any:
            finding = ctx.api_key == FIND_COORDINATOR
            key_type = getattr(request, "key_type", None) if finding else None
            self.counts[(ctx.api_key, key_type)] += 1
            return handle(ctx, request)

        router.handle = counting

    def group_requests(self) -> int:
        return (
            self.counts[(LIST_GROUPS, None)]
            + self.counts[(OFFSET_FETCH, None)]
            + self.counts[(FIND_COORDINATOR, 0)]
            + self.counts[(DESCRIBE_CLUSTER, None)]
        )


def exposed(settings: ClusterSettings, snap: ClusterSnapshot) -> dict[str, list[dict[str, str]]]:
    """The blocked-group series the collector exposes for `snap`: name -> label sets."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    store = SnapshotStore([settings])
    store.publish(snap, 0.1)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if "blocked" in sample.name:
                out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def _consume_groups(bootstrap: str) -> dict[str, int]:
    committed = {}
    for group, isolation in (("grp-rc", READ_COMMITTED), ("grp-ru", READ_UNCOMMITTED)):
        committed[group] = consume_and_commit(
            bootstrap, group, TOPIC, 0, isolation_level=isolation
        ).committed_offset
    commit_offset(bootstrap, "grp-lagging", TOPIC, 0, LAGGING_OFFSET)
    return committed


@pytest.fixture(scope="module")
def blocked_sim() -> Iterator[tuple[SimCluster, dict[str, int], int]]:
    with SimCluster(
        brokers=3, topics={TOPIC: 3}, broker_config=CAPTURE_BROKER_CONFIG
    ) as sim:
        b = sim.bootstrap_servers
        committed_transaction(b, "grp-commit-1", TOPIC, {0: 5})
        _, _, hang_offset = hanging_transaction(
            b, "grp-hang", TOPIC, 0, backdate_ms=HANG_BACKDATE_MS
        )
        committed_transaction(b, "grp-commit-2", TOPIC, {0: 3})
        yield sim, _consume_groups(b), hang_offset


@pytest.fixture(autouse=True)
def _grants_restored(blocked_sim: tuple[SimCluster, dict[str, int], int]) -> Iterator[None]:
    """The module shares one cluster: what a test denies is granted again after it."""
    yield
    sim = blocked_sim[0]
    sim.call(sim.state.denied_groups.clear)
    sim.call(sim.state.denied_cluster.clear)


def test_read_committed_group_is_blocked_and_the_others_are_not(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    sim, committed, hang_offset = blocked_sim
    # The scenario itself: grp-rc stopped at the hanging transaction's start offset (the LSO),
    # grp-ru read past it, grp-lagging sits below it.
    assert committed["grp-rc"] == hang_offset
    assert committed["grp-ru"] > hang_offset
    with poll_env(sim, "groups") as env:
        obs, snap = env.poll()
    tp = next(iter(obs.last_stable_offsets))
    assert obs.last_stable_offsets[tp] == hang_offset < obs.high_watermarks[tp]
    (late,) = snap.late_transactions
    assert late.transaction.current_txn_start_offset == hang_offset
    assert late.blocked_groups_unknown is None
    assert [(g.group_id, g.topic, g.partition, g.committed_offset)
            for g in late.blocked_groups] == [("grp-rc", TOPIC, 0, hang_offset)]
    assert snap.blocked_groups_unknown_by_reason == {}
    # All three groups were read; grp-ru and grp-lagging are simply not at the LSO.
    assert obs.consumer_groups is not None
    read = {(c.group_id, c.offset) for c in obs.consumer_groups.committed}
    assert read == {("grp-rc", hang_offset), ("grp-ru", committed["grp-ru"]),
                    ("grp-lagging", LAGGING_OFFSET)}


def test_blocked_seconds_grow_from_when_the_exporter_first_saw_the_group_there(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    sim, _, _ = blocked_sim
    with poll_env(sim, "groups-duration") as env:
        _, first = env.poll()
        sim.call(sim.clock.advance, 90_000)
        _, second = env.poll()
    (g1,) = first.late_transactions[0].blocked_groups
    (g2,) = second.late_transactions[0].blocked_groups
    assert g1.blocked_seconds == 0.0
    assert g2.blocked_seconds == pytest.approx(90.0, abs=1.0)
    # Never more than the transaction has been open: it is a lower bound of the wait.
    assert g2.blocked_seconds < second.late_transactions[0].age_seconds


def test_group_requests_are_batched_and_bounded(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    sim, _, _ = blocked_sim
    log = RequestLog(sim)
    with poll_env(sim, "groups-count") as env:
        env.poll()
        log.counts.clear()
        _, snap = env.poll()
    assert snap.late_transactions[0].blocked_groups
    brokers = len(sim.node_ids)
    assert log.counts[(LIST_GROUPS, None)] == brokers  # one per broker
    assert log.counts[(FIND_COORDINATOR, 0)] == 1  # every group in one request
    coordinators = len({sim.call(sim.state.group_coordinator, g)[0]
                        for g in ("grp-rc", "grp-ru", "grp-lagging")})
    assert log.counts[(OFFSET_FETCH, None)] == coordinators  # many groups per request


def test_unauthorized_group_makes_the_count_unknown_not_zero(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    sim, _, _ = blocked_sim
    sim.deny_group("User:ANONYMOUS", "grp-lagging", "DESCRIBE")
    with poll_env(sim, "groups-denied") as env:
        _, snap = env.poll()
    (late,) = snap.late_transactions
    assert late.blocked_groups_unknown == UnobservedReason.UNAUTHORIZED.value
    assert late.blocked_groups == ()
    assert snap.blocked_groups_unknown_by_reason == {"unauthorized": 1}
    errors = {(e.api, e.error) for e in snap.request_errors}
    assert ("FindCoordinator", "GROUP_AUTHORIZATION_FAILED") in errors


def test_without_describe_on_the_cluster_a_group_listgroups_hides_makes_the_count_unknown(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    """No Describe on the cluster and none on grp-rc: ListGroups silently leaves grp-rc out, so
    the groups that are read (grp-ru, grp-lagging) show no blocked group. That is not "0
    blocked": the count is unknown (unauthorized)."""
    sim, _, _ = blocked_sim
    sim.deny_group(PRINCIPAL, "grp-rc", "DESCRIBE")
    sim.deny_cluster(PRINCIPAL, "DESCRIBE")
    with poll_env(sim, "groups-no-cluster-describe") as env:
        obs, snap = env.poll()
        exposition = exposed(env.settings, snap)
    assert obs.consumer_groups is not None
    assert {c.group_id for c in obs.consumer_groups.committed} == {"grp-ru", "grp-lagging"}
    (late,) = snap.late_transactions
    assert late.blocked_groups == ()
    assert late.blocked_groups_unknown == UnobservedReason.UNAUTHORIZED.value
    assert snap.blocked_groups_unknown_by_reason == {"unauthorized": 1}
    assert "kafka_transaction_blocked_consumer_groups" not in exposition
    assert exposition["kafka_txn_exporter_blocked_consumer_groups_unknown"] == [
        {"cluster": env.settings.name, "reason": "unauthorized"}]


def test_without_describe_on_the_cluster_a_group_found_blocked_is_still_reported(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    """No Describe on the cluster, Describe on every group here: grp-rc is listed and found at
    the LSO, so its blocked series stays (true); the count is still unknown (another group could
    be hidden)."""
    sim, _, hang_offset = blocked_sim
    sim.deny_cluster(PRINCIPAL, "DESCRIBE")
    with poll_env(sim, "groups-found-no-cluster-describe") as env:
        _, snap = env.poll()
        exposition = exposed(env.settings, snap)
    (late,) = snap.late_transactions
    assert [(g.group_id, g.committed_offset) for g in late.blocked_groups] == [
        ("grp-rc", hang_offset)]
    assert late.blocked_groups_unknown == UnobservedReason.UNAUTHORIZED.value
    assert "kafka_transaction_blocked_consumer_groups" not in exposition
    assert [s["group"] for s in exposition["kafka_consumer_group_blocked_seconds"]] == [
        "grp-rc"]


def test_describe_on_the_cluster_is_asked_once_per_config_refresh(
    blocked_sim: tuple[SimCluster, dict[str, int], int], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One small DescribeCluster per `config_refresh_seconds`, not one per poll; with Describe on
    the cluster the count is known. A grant made meanwhile is seen at the next refresh."""
    sim, _, _ = blocked_sim
    now = [1000.0]
    monkeypatch.setattr(groups_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    log = RequestLog(sim)
    sim.deny_cluster(PRINCIPAL, "DESCRIBE")
    with poll_env(sim, "groups-cluster-describe-cached", config_refresh_seconds=60.0) as env:
        _, denied = env.poll()
        sim.call(sim.state.denied_cluster.clear)  # granted
        now[0] += 59.0
        _, cached = env.poll()
        now[0] += 1.0
        _, refreshed = env.poll()
        _, again = env.poll()
    assert log.counts[(DESCRIBE_CLUSTER, None)] == 2
    assert denied.late_transactions[0].blocked_groups_unknown == "unauthorized"
    assert cached.late_transactions[0].blocked_groups_unknown == "unauthorized"
    for snap in (refreshed, again):
        assert snap.late_transactions[0].blocked_groups_unknown is None
        assert [g.group_id for g in snap.late_transactions[0].blocked_groups] == ["grp-rc"]


def test_no_group_request_without_a_late_transaction() -> None:
    with SimCluster(brokers=3, topics={QUIET_TOPIC: 2}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        b = sim.bootstrap_servers
        committed_transaction(b, "quiet-commit", QUIET_TOPIC, {0: 2})
        txn = open_transaction(b, "quiet-open", QUIET_TOPIC, [1], transaction_timeout_ms=60_000)
        try:
            commit_offset(b, "quiet-readers", QUIET_TOPIC, 0, 1)
            log = RequestLog(sim)
            with poll_env(sim, "quiet") as env:
                obs, snap = env.poll()
                obs2, _ = env.poll()
        finally:
            txn.close_quietly()
    assert obs.open_transactions and not snap.late_transactions
    assert obs.consumer_groups is None and obs2.consumer_groups is None
    assert log.counts[(2, None)] > 0  # the LSO is still read (same requests as before)
    assert log.group_requests() == 0


def test_scan_json_names_the_blocked_group_of_the_simulated_cluster(
    blocked_sim: tuple[SimCluster, dict[str, int], int],
) -> None:
    sim, _, hang_offset = blocked_sim
    out, err = io.StringIO(), io.StringIO()
    code = run_scan([cluster_settings(sim, "scan-groups")], "json", out, err)
    assert code == EXIT_HANGING
    (row,) = json.loads(out.getvalue())["transactions"]
    assert row["start_offset"] == hang_offset
    assert [g["group_id"] for g in row["blocked_groups"]] == ["grp-rc"]
    assert row["blocked_groups_unknown"] is None


def test_the_demos_read_committed_group_is_blocked_behind_its_hanging_transaction() -> None:
    """The demo's set-up (exporter/demo.py): its payments workload with the read_committed
    group DEMO_CONSUMER_GROUP committing as it reads, then a hanging transaction on partition 0
    (backdated here so that it is late at once). The group stops at its start offset while the
    workload's commits move the high watermark on: blocked; nowhere else."""
    with SimCluster(brokers=3, topics={HANGING_TOPIC: HANGING_PARTITIONS},
                    broker_config=CAPTURE_BROKER_CONFIG) as sim:
        workload = Workload(sim.bootstrap_servers, HANGING_TOPIC,
                            partitions=range(HANGING_PARTITIONS), transactions_per_second=50,
                            abort_ratio=0.0, long_running_ratio=0.0, seed=5,
                            consumer_group=DEMO_CONSUMER_GROUP)
        assert workload.consumer is not None
        workload.consumer.commit_interval_s = 0.1

        def committed_at(start: int) -> bool:
            c = sim.call(sim.state.groups.committed, DEMO_CONSUMER_GROUP, HANGING_TOPIC, 0)
            hw = sim.call(lambda: sim.state.partition(HANGING_TOPIC, 0).log.high_watermark)
            return c is not None and c.offset == start and hw > start + 5

        with workload, poll_env(sim, "demo-groups") as env:
            _, _, start = hanging_transaction(sim.bootstrap_servers, "demo-hanging-1",
                                              HANGING_TOPIC, 0, backdate_ms=HANG_BACKDATE_MS)
            deadline = time.monotonic() + 15
            while not committed_at(start) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert committed_at(start)
            _, snap = env.poll()
    assert workload.consumer.stats.errors == 0, workload.consumer.stats.last_error
    (late,) = snap.late_transactions
    assert (late.transaction.topic, late.transaction.partition) == (HANGING_TOPIC, 0)
    assert late.blocked_groups_unknown is None
    assert [(g.group_id, g.committed_offset) for g in late.blocked_groups] == [
        (DEMO_CONSUMER_GROUP, start)]


def test_an_orphaned_transaction_not_yet_late_reports_its_blocked_group() -> None:
    """A fresh hanging transaction is not late, but orphaned after two untracked polls: its
    groups are looked up from then on (and not before: no group request while it is neither)."""
    with SimCluster(brokers=3, topics={TOPIC: 3}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        b = sim.bootstrap_servers
        _, _, start = hanging_transaction(b, "young-hang", TOPIC, 1, now_ms=sim.clock.now_ms)
        commit_offset(b, "young-readers", TOPIC, 1, start)
        log = RequestLog(sim)
        with poll_env(sim, "orphan-groups") as env:
            _, first = env.poll()
            before = log.group_requests()
            snaps = []
            for _ in range(2):
                sim.call(sim.clock.advance, 30_000)
                snaps.append(env.poll()[1])
    assert first.orphaned_transactions == () and before == 0
    last = snaps[-1]
    assert last.late_transactions == ()
    (orphan,) = last.orphaned_transactions
    assert orphan.blocked_groups_unknown is None
    assert [(g.group_id, g.committed_offset) for g in orphan.blocked_groups] == [
        ("young-readers", start)]
    assert log.group_requests() > 0


def test_brokers_without_batched_group_lookups_make_the_groups_unknown_not_none() -> None:
    """Kafka 2.8 has FindCoordinator up to v3 and OffsetFetch up to v7 (one group per request):
    the exporter does not fall back to one request per group, so the groups are unknown
    (unsupported_api) and nothing past ListGroups is sent."""
    with SimCluster(brokers=1, profile="2.8", topics={TOPIC: 1},
                    broker_config=CAPTURE_BROKER_CONFIG) as sim:
        b = sim.bootstrap_servers
        _, _, start = hanging_transaction(b, "old-hang", TOPIC, 0, backdate_ms=HANG_BACKDATE_MS)
        committed_transaction(b, "old-commit", TOPIC, {0: 2})
        commit_offset(b, "old-readers", TOPIC, 0, start)
        log = RequestLog(sim)
        with poll_env(sim, "old-groups") as env:
            _, snap = env.poll()
    (late,) = snap.late_transactions
    assert late.blocked_groups == ()
    assert late.blocked_groups_unknown == UnobservedReason.UNSUPPORTED_API.value
    assert snap.blocked_groups_unknown_by_reason == {"unsupported_api": 1}
    assert log.counts[(LIST_GROUPS, None)] == 1
    assert log.counts[(FIND_COORDINATOR, 0)] == 0 and log.counts[(OFFSET_FETCH, None)] == 0


def test_kafka_3_0_brokers_answer_the_batched_lookup_and_the_group_is_found() -> None:
    """Kafka 3.0: ListGroups v4 (no group type in the answer), FindCoordinator v4, OffsetFetch
    v8: the first release with everything batched."""
    with SimCluster(brokers=1, profile="3.0", topics={TOPIC: 1},
                    broker_config=CAPTURE_BROKER_CONFIG) as sim:
        b = sim.bootstrap_servers
        _, _, start = hanging_transaction(b, "v30-hang", TOPIC, 0, backdate_ms=HANG_BACKDATE_MS)
        committed_transaction(b, "v30-commit", TOPIC, {0: 2})
        commit_offset(b, "v30-readers", TOPIC, 0, start)
        with poll_env(sim, "v30-groups") as env:
            _, snap = env.poll()
    (late,) = snap.late_transactions
    assert late.blocked_groups_unknown is None
    assert [g.group_id for g in late.blocked_groups] == ["v30-readers"]


@pytest.mark.parametrize(("profile", "version"), [("3.0", 0), ("3.8", 1), ("4.0", 2), ("4.1", 2)])
def test_each_release_answers_describe_cluster_and_a_hidden_group_is_unknown_not_none(
    profile: str, version: int,
) -> None:
    """Every release with the batched group lookups (3.0+) has DescribeCluster; the exporter asks
    it at the release's newest version, once, and logs the incomplete listing once."""
    with SimCluster(brokers=1, profile=profile, topics={TOPIC: 1},
                    broker_config=CAPTURE_BROKER_CONFIG) as sim:
        b = sim.bootstrap_servers
        _, _, start = hanging_transaction(b, "rel-hang", TOPIC, 0, backdate_ms=HANG_BACKDATE_MS)
        committed_transaction(b, "rel-commit", TOPIC, {0: 2})
        commit_offset(b, "rel-hidden", TOPIC, 0, start)
        sim.deny_group(PRINCIPAL, "rel-hidden", "DESCRIBE")
        sim.deny_cluster(PRINCIPAL, "DESCRIBE")
        versions: list[int] = []
        handle = sim.router.handle

        def recording(ctx: Any, request: Any) -> Any:
            if ctx.api_key == DESCRIBE_CLUSTER:
                versions.append(ctx.api_version)
            return handle(ctx, request)

        sim.router.handle = recording
        with structlog.testing.capture_logs() as logs, poll_env(sim, f"rel-{profile}") as env:
            _, first = env.poll()
            _, second = env.poll()
    assert versions == [version]
    for snap in (first, second):
        (late,) = snap.late_transactions
        assert late.blocked_groups == ()
        assert late.blocked_groups_unknown == UnobservedReason.UNAUTHORIZED.value
    warned = [e for e in logs if e["event"] == "consumer_group_list_may_be_incomplete"]
    assert [e["detail"] for e in warned] == ["CLUSTER_AUTHORIZATION_FAILED"]
