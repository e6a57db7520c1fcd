"""The exporter against every Kafka release it claims (docs/compatibility.md), over TCP.

Each simulated broker advertises and honours only its release's API versions
(simulator/kafka_sim/versions.py): DescribeProducers from 2.8, ListTransactions/DescribeTransactions
from 3.0, ListTransactions v1 from 3.8 and v2 from 4.1
(docs/kafka-semantics.md#versions-by-release). The exporter negotiates per broker (ApiVersions)
and must never turn a missing API into "no late transactions".

Transactions are made with kafka_sim/producer.py, which negotiates with ApiVersions on every
connection like a real client: a broker older than its preferred versions (Metadata v12,
hanging Produce v11) gets its own highest, never a version it would close the connection on
(capture 40).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    ListTransactionsRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest
from kafka_sim.client import ConnectionClosedError, KafkaProtocolError, RawKafkaClient
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from kafka_sim.versions import PROFILES
from simhelpers import (
    CAPTURE_BROKER_CONFIG,
    MINUTE_MS,
    PollEnv,
    cluster_poller,
    cluster_settings,
)

from exporter.analyze import unobserved_reason
from exporter.model import (
    Classification,
    StartTimeSource,
    UnobservedReason,
)

RELEASES = ["2.8", "3.0", "3.8", "4.0", "4.1"]
WITH_COORDINATOR_APIS = {"3.0", "3.8", "4.0", "4.1"}
# Brokers as in the real-broker capture (partition verification is a 3.6+ setting; older
# releases do not know it and never verify).
BROKER_CONFIG = CAPTURE_BROKER_CONFIG
TRANSACTION_ABORTABLE = 120
PRODUCE, METADATA, DESCRIBE_PRODUCERS, LIST_TRANSACTIONS = 0, 3, 61, 66


@dataclass
class Env(PollEnv):
    seen: list[tuple[int, int, int]] = field(default_factory=list)
    """(broker id, api key, api version) of every request the brokers answered."""

    def partition_led_by(self, broker_id: int, topic: str = "t") -> int:
        return next(p for p in range(6) if self.leader(topic, p) == broker_id)

    def versions_seen(self, api_key: int) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for broker, key, version in self.seen:
            if key == api_key:
                out.setdefault(broker, set()).add(version)
        return out


@pytest.fixture
def make_env() -> Callable[..., Any]:
    @contextmanager
    def make(
        release: str,
        profiles: Mapping[int, str] | None = None,
        broker_config: Mapping[str, str] = BROKER_CONFIG,
        request_timeout_seconds: float = 2.0,
    ) -> Iterator[Env]:
        with SimCluster(
            brokers=3,
            topics={"t": 6},
            broker_config=broker_config,
            profile=release,
            profiles=profiles,
        ) as sim:
            seen: list[tuple[int, int, int]] = []
            router = sim.router
            handle = router.handle

            def recording(ctx: Any, request: Any) -> Any:
                seen.append((ctx.broker_id, ctx.api_key, ctx.api_version))
                return handle(ctx, request)

            sim.call(setattr, router, "handle", recording)
            settings = cluster_settings(
                sim,
                "compat",
                request_timeout_seconds=request_timeout_seconds,
                late_buffer_seconds=300.0,
                min_reported_duration_seconds=0.0,
            )
            with cluster_poller(sim, settings) as poller:
                yield Env(sim, poller, settings, seen)

    return make


# -- the simulator answers as each release does ------------------------------------------------


@pytest.mark.parametrize("release", ["2.7", *RELEASES])
def test_api_versions_answer_is_the_release_table(release: str) -> None:
    with SimCluster(brokers=1, profile=release) as sim:
        host, port = sim.endpoints[1]
        with RawKafkaClient(host, port) as client:
            response = client.request(
                ApiVersionsRequest(client_software_name="t", client_software_version="0", version=3)
            )
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == dict(
        PROFILES[release].api_versions
    )


@pytest.mark.parametrize(
    ("release", "request_"),
    [
        ("2.7", DescribeProducersRequest(topics=[], version=0)),
        ("2.8", ListTransactionsRequest(state_filters=[], producer_id_filters=[], version=0)),
        ("3.0", ListTransactionsRequest(state_filters=[], producer_id_filters=[], version=1)),
        ("4.0", ListTransactionsRequest(state_filters=[], producer_id_filters=[], version=2)),
    ],
    ids=["2.7-describe-producers", "2.8-list-v0", "3.0-list-v1", "4.0-list-v2"],
)
def test_api_or_version_the_release_lacks_closes_the_connection(
    release: str, request_: Any
) -> None:
    """As Kafka does for an unsupported API key or version (capture 40): no answer at all."""
    with SimCluster(brokers=1, profile=release) as sim:
        host, port = sim.endpoints[1]
        with (
            RawKafkaClient(host, port, timeout_s=5.0) as client,
            pytest.raises(ConnectionClosedError),
        ):
            client.request(request_)


@pytest.mark.parametrize(("release", "accepted"), [("2.8", True), ("3.0", True), ("3.8", False)])
def test_unadded_partition_produce_before_and_after_verification(
    make_env: Callable[..., Any], release: str, accepted: bool
) -> None:
    """Before 3.6 (KIP-890 part 1) a broker appends a transactional batch for a partition never
    added to the transaction; from 3.6 it verifies by default: INVALID_TXN_STATE, or
    TRANSACTION_ABORTABLE for Produce v11 (3.8+), which the raw producer sends where offered."""
    with make_env(release, broker_config={"transaction.max.timeout.ms": "60000"}) as env:
        if accepted:
            hanging_transaction(env.bootstrap, "hang-1", "t", 0, now_ms=env.now_ms)
        else:
            with pytest.raises(KafkaProtocolError) as raised:
                hanging_transaction(env.bootstrap, "hang-1", "t", 0, now_ms=env.now_ms)
            assert raised.value.error_code == TRANSACTION_ABORTABLE
        obs, _ = env.poll()
        assert len(obs.open_transactions) == (1 if accepted else 0)
        # The setting exists only where the broker has it (DescribeConfigs, all configs).
        names = {e.name for e in env.sim.call(env.sim.state.broker_configs, 1)}
        assert ("transaction.partition.verification.enable" in names) is not accepted


# -- the main scenarios on every release -------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_no_transactions(make_env: Callable[..., Any], release: str) -> None:
    with make_env(release) as env:
        obs, snap = env.poll()
        assert obs.open_transactions == ()
        assert obs.unobserved == {}
        assert [(b.broker_id, b.up, b.observable) for b in obs.brokers] == [
            (1, True, True),
            (2, True, True),
            (3, True, True),
        ]
        assert all(b.transaction_max_timeout_ms == 60000 for b in obs.brokers)
        assert snap.unobserved_by_reason == {}
        assert all(
            (b.partitions_with_open_transactions, b.partitions_with_late_transactions) == (0, 0)
            for b in snap.brokers
        )
        has_coordinator_apis = release in WITH_COORDINATOR_APIS
        assert obs.coordinator_view_complete is has_coordinator_apis
        # No listing on 2.8: the count is unknown (None), not "no transactions".
        assert obs.transaction_states == ({} if has_coordinator_apis else None)
        # Kafka < 3.0 lacking the coordinator APIs is the broker's release, not an error.
        assert obs.request_errors == ()


@pytest.mark.parametrize("release", RELEASES)
def test_open_transaction_seen_not_late(make_env: Callable[..., Any], release: str) -> None:
    with make_env(release) as env:
        txn = open_transaction(env.bootstrap, "open-1", "t", [0, 1], now_ms=env.now_ms)
        try:
            env.sim.clock.advance(20_000)  # inside its 60 s timeout
            obs, snap = env.poll()
        finally:
            txn.close_quietly()
        assert sorted((t.topic, t.partition) for t in obs.open_transactions) == [
            ("t", 0),
            ("t", 1),
        ]
        assert all(
            t.start_time_source is StartTimeSource.BATCH_TIMESTAMP for t in obs.open_transactions
        )
        assert snap.late_transactions == ()
        assert sum(b.partitions_with_open_transactions for b in snap.brokers) == 2
        assert snap.cluster_max_active_transaction_duration_seconds >= 20.0
        if release in WITH_COORDINATOR_APIS:
            assert obs.transaction_states == {"Ongoing": 1}


@pytest.mark.parametrize("release", RELEASES)
def test_hanging_transaction(make_env: Callable[..., Any], release: str) -> None:
    with make_env(release) as env:
        pid, _, start_offset = hanging_transaction(
            env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        obs, snap = env.poll()
        (late,) = snap.late_transactions
        assert (late.transaction.producer_id, late.transaction.current_txn_start_offset) == (
            pid,
            start_offset,
        )
        assert late.age_seconds >= 30 * 60
        leader = env.leader("t", 0)
        by_broker = {b.broker_id: b for b in snap.brokers}
        assert by_broker[leader].partitions_with_late_transactions == 1
        if release in WITH_COORDINATOR_APIS:
            # find-hanging step 5: hang-1 is Empty at its coordinator, the partition unknown.
            assert late.classification is Classification.HANGING
            assert late.transactional_id == "hang-1"
            assert by_broker[leader].partitions_with_hanging_transactions == 1
            assert snap.unclassified_by_reason == {}
        else:
            # 2.8: late is still detected, but "hanging" needs the coordinator's word.
            assert late.classification is Classification.UNKNOWN
            assert late.transactional_id == ""
            assert not obs.coordinator_view_complete
            # Unknown, not 0: a hanging transaction may hide among the unknown ones; why is
            # counted (the release lacks ListTransactions).
            assert by_broker[leader].partitions_with_hanging_transactions is None
            assert obs.coordinator_view_unsupported == {"ListTransactions"}
            assert snap.unclassified_by_reason == {"unsupported_api": 1}


@pytest.mark.parametrize("release", RELEASES)
def test_broker_down(make_env: Callable[..., Any], release: str) -> None:
    with make_env(release) as env:
        survivor = 1
        partition = env.partition_led_by(survivor)
        hanging_transaction(
            env.bootstrap, "hang-1", "t", partition, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        env.poll()
        env.sim.stop_broker(3)
        obs, snap = env.poll()
        assert {b.broker_id: b.up for b in obs.brokers} == {1: True, 2: True, 3: False}
        # Replication factor 1: broker 3's partitions (internal topics too) lose their leader.
        lost = {tp for tp, leader in obs.leaders.items() if leader < 0}
        assert any(tp.topic == "t" for tp in lost)
        assert set(obs.unobserved) == lost
        assert snap.unobserved_by_reason == {UnobservedReason.NO_LEADER.value: len(lost)}
        (late,) = snap.late_transactions
        assert late.transaction.partition == partition
        txn_state_partition = env.sim.call(env.sim.state.coordinator.partition_for, "hang-1")
        coordinator_lost = env.leader("__transaction_state", txn_state_partition) == -1
        # The coordinator view counts as complete only while every __transaction_state
        # partition has a leader: otherwise an unmapped producer is unknown, not hanging.
        assert obs.coordinator_view_complete is (
            release in WITH_COORDINATOR_APIS
            and not any(tp.topic == "__transaction_state" for tp in lost)
        )
        if release in WITH_COORDINATOR_APIS and not coordinator_lost:
            assert late.classification is Classification.HANGING
        else:
            assert late.classification is Classification.UNKNOWN
            # A leaderless coordinator is an error; a release without the APIs is not.
            reason = "error" if release in WITH_COORDINATOR_APIS else "unsupported_api"
            assert snap.unclassified_by_reason == {reason: 1}


@pytest.mark.parametrize(
    ("release", "expected"),
    [("3.0", 0), ("3.8", 1), ("4.0", 1), ("4.1", 2)],
)
def test_list_transactions_at_the_best_version(
    make_env: Callable[..., Any], release: str, expected: int
) -> None:
    """kafka-python speaks ListTransactions up to v2; each broker gets min(that, its max)."""
    with make_env(release) as env:
        env.poll()
        assert env.versions_seen(LIST_TRANSACTIONS) == {1: {expected}, 2: {expected}, 3: {expected}}
        assert set().union(*env.versions_seen(DESCRIBE_PRODUCERS).values()) == {0}


@pytest.mark.parametrize(
    ("release", "produce", "metadata"),
    [("2.8", 9, 11), ("3.0", 9, 11), ("3.8", 11, 12), ("4.0", 11, 12), ("4.1", 11, 12)],
)
def test_workload_negotiates_each_request_version(
    make_env: Callable[..., Any], release: str, produce: int, metadata: int
) -> None:
    """The workload's hanging Produce prefers v11 (capture hang-1) and its Metadata v12; an older
    broker gets its own highest (ApiVersions), where a fixed version would close the
    connection (capture 40)."""
    with make_env(release) as env:
        hanging_transaction(env.bootstrap, "hang-1", "t", 0, now_ms=env.now_ms)
        assert env.versions_seen(PRODUCE) == {env.leader("t", 0): {produce}}
        assert set().union(*env.versions_seen(METADATA).values()) == {metadata}


# -- mixed clusters (rolling upgrades) --------------------------------------------------------


def test_rolling_upgrade_to_2_8_old_broker_is_unobservable_not_zero(
    make_env: Callable[..., Any],
) -> None:
    """Broker 1 still on 2.7 (no DescribeProducers): its partitions are unobserved with reason
    unsupported_api and its per-broker counts are unknown; the others report normally."""
    with make_env("2.8", profiles={1: "2.7"}) as env:
        hung = env.partition_led_by(2)
        hanging_transaction(
            env.bootstrap, "hang-1", "t", hung, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        with structlog.testing.capture_logs() as logs:
            obs, snap = env.poll()
            env.poll()
        old = {tp for tp, leader in obs.leaders.items() if leader == 1}
        assert any(tp.topic == "t" for tp in old)
        assert set(obs.unobserved) == old
        assert snap.unobserved_by_reason == {UnobservedReason.UNSUPPORTED_API.value: len(old)}
        assert [(b.broker_id, b.up, b.observable) for b in obs.brokers] == [
            (1, True, False),
            (2, True, True),
            (3, True, True),
        ]
        assert [b.observable for b in snap.brokers] == [False, True, True]
        (late,) = snap.late_transactions
        assert late.transaction.partition == hung
        assert late.classification is Classification.UNKNOWN  # no coordinator APIs on 2.x
        assert {b.broker_id: b.partitions_with_late_transactions for b in snap.brokers}[2] == 1
        unsupported = [
            e
            for e in logs
            if e["event"] == "api_not_supported_by_broker" and e["api"] == "DescribeProducers"
        ]
        assert [e["broker_id"] for e in unsupported] == [1]  # once, not once per poll
        assert not any(e.api == "DescribeProducers" for e in obs.request_errors)


def test_rolling_upgrade_3_0_to_3_8_each_broker_at_its_own_version(
    make_env: Callable[..., Any],
) -> None:
    with make_env("3.8", profiles={1: "3.0"}) as env:
        hanging_transaction(
            env.bootstrap, "hang-1", "t", 0, backdate_ms=30 * MINUTE_MS, now_ms=env.now_ms
        )
        obs, snap = env.poll()
        assert env.versions_seen(LIST_TRANSACTIONS) == {1: {0}, 2: {1}, 3: {1}}
        assert obs.unobserved == {}
        assert obs.coordinator_view_complete
        (late,) = snap.late_transactions
        assert late.classification is Classification.HANGING


def test_rolling_upgrade_4_0_to_4_1_list_transactions_v1_and_v2(
    make_env: Callable[..., Any],
) -> None:
    with make_env("4.1", profiles={3: "4.0"}) as env:
        open_transaction(env.bootstrap, "open-1", "t", [0], now_ms=env.now_ms).close_quietly()
        obs, _ = env.poll()
        assert env.versions_seen(LIST_TRANSACTIONS) == {1: {2}, 2: {2}, 3: {1}}
        assert obs.transaction_states == {"Ongoing": 1}
        assert len(obs.open_transactions) == 1


def test_broker_down_and_old_broker_reasons_are_kept_apart(
    make_env: Callable[..., Any],
) -> None:
    """A slow broker (timeout: broker_down) next to a 2.7 broker (unsupported_api)."""
    with make_env("2.8", profiles={1: "2.7"}, request_timeout_seconds=0.5) as env:
        env.poll()  # connect and negotiate first
        # Slow on every API: after the first poll its partitions are screened (Fetch,
        # ListOffsets), not asked DescribeProducers.
        env.sim.set_latency(1200, broker_id=3)
        obs, snap = env.poll()
        on_1 = sum(1 for leader in obs.leaders.values() if leader == 1)
        on_3 = sum(1 for leader in obs.leaders.values() if leader == 3)
        assert snap.unobserved_by_reason == {
            UnobservedReason.BROKER_DOWN.value: on_3,
            UnobservedReason.UNSUPPORTED_API.value: on_1,
        }
        assert [(b.broker_id, b.up, b.observable) for b in obs.brokers] == [
            (1, True, False),
            (2, True, True),
            (3, False, True),
        ]


# -- the reason vocabulary (pure) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("detail", "reason"),
    [
        ("BROKER_UNREACHABLE", UnobservedReason.BROKER_DOWN),
        ("REQUEST_TIMEOUT", UnobservedReason.BROKER_DOWN),
        ("AUTHENTICATION_FAILED", UnobservedReason.BROKER_DOWN),
        ("UNSUPPORTED_VERSION", UnobservedReason.UNSUPPORTED_API),
        ("TOPIC_AUTHORIZATION_FAILED", UnobservedReason.UNAUTHORIZED),
        ("NOT_LEADER_OR_FOLLOWER", UnobservedReason.NOT_LEADER),
        ("LEADER_NOT_AVAILABLE", UnobservedReason.NO_LEADER),
        ("KAFKA_STORAGE_ERROR", UnobservedReason.ERROR),
        ("UNKNOWN_TOPIC_OR_PARTITION", UnobservedReason.ERROR),
        ("DECODE_ERROR", UnobservedReason.ERROR),
        ("unsupported_api", UnobservedReason.UNSUPPORTED_API),
    ],
)
def test_every_unobserved_detail_maps_into_the_fixed_vocabulary(
    detail: str, reason: UnobservedReason
) -> None:
    assert unobserved_reason(detail) is reason
