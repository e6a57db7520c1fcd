"""No false number: against the simulator, a poller and `analyze`
report an unknown as absent (None) with its reason counted, never 0, and never use an
impossible producer timestamp as a transaction's start.

Start time = the earliest trustworthy evidence (`rules.start_time`): the batch timestamp when
possible, else LastTimestamp, never later than when the exporter first saw the transaction.
A per-broker or per-cluster number is known only when every partition it covers was observed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction, open_transaction
from simhelpers import CAPTURE_BROKER_CONFIG, MINUTE_MS, PollEnv, poll_env

from exporter.analyze import analyze, unobserved_reason
from exporter.model import (
    BrokerSummary,
    Classification,
    ClusterSnapshot,
    StartTimeSource,
    TopicPartition,
    UnobservedReason,
)
from exporter.rules import start_time

DESCRIBE_PRODUCERS, LIST_TRANSACTIONS = 61, 66
UNKNOWN_SERVER_ERROR, NOT_LEADER_OR_FOLLOWER = -1, 6
COORDINATOR_LOAD_IN_PROGRESS, TOPIC_AUTHORIZATION_FAILED = 14, 29
LATE_AFTER_SECONDS = 60 + 10  # the capture's transaction.max.timeout.ms + late buffer below


@pytest.fixture
def env() -> Iterator[PollEnv]:
    with (
        SimCluster(brokers=3, topics={"t": 3}, broker_config=CAPTURE_BROKER_CONFIG) as sim,
        poll_env(
            sim,
            "sim",
            request_timeout_seconds=2.0,
            late_buffer_seconds=10.0,
            min_reported_duration_seconds=0.0,
        ) as env,
    ):
        yield env


def by_broker(snap: ClusterSnapshot) -> dict[int, BrokerSummary]:
    return {b.broker_id: b for b in snap.brokers}


def counts(summary: BrokerSummary) -> tuple[int | None, int | None, int | None]:
    return (
        summary.partitions_with_open_transactions,
        summary.partitions_with_late_transactions,
        summary.partitions_with_hanging_transactions,
    )


# -- start time --------------------------------------------------------------------------------


def test_start_time_rule_never_uses_an_impossible_timestamp() -> None:
    seen = 1_700_000_000_000
    assert start_time(seen - 5000, seen - 1000, seen) == (
        seen - 5000, StartTimeSource.BATCH_TIMESTAMP)
    assert start_time(None, seen - 1000, seen) == (seen - 1000, StartTimeSource.LAST_TIMESTAMP)
    assert start_time(-1, seen - 1000, seen) == (seen - 1000, StartTimeSource.LAST_TIMESTAMP)
    assert start_time(-1, -1, seen) == (seen, StartTimeSource.FIRST_SEEN)
    fast = seen + 50 * MINUTE_MS  # a producer clock 50 min fast
    assert start_time(fast, fast + 10, seen) == (seen, StartTimeSource.FIRST_SEEN)
    assert start_time(-(2**63), -(2**63), seen) == (seen, StartTimeSource.FIRST_SEEN)


def test_create_time_minus_one_is_not_a_57_year_old_transaction(env: PollEnv) -> None:
    """A batch with CreateTime -1 (Kafka's "no timestamp", which brokers accept)."""
    txn = open_transaction(env.bootstrap, "no-ts", "t", {0: [(b"k", b"v", -1)]},
                           now_ms=env.now_ms)
    try:
        obs, snap = env.poll()
        (open_txn,) = obs.open_transactions
        assert open_txn.last_timestamp_ms == -1  # the broker reports what the producer sent
        assert open_txn.start_time_source is StartTimeSource.FIRST_SEEN
        assert open_txn.start_time_ms == obs.observed_at_ms
        assert snap.late_transactions == ()
        assert snap.cluster_max_active_transaction_duration_seconds == 0.0  # not 1.8e9 s
        assert snap.open_transactions_by_start_time_source == {"first_seen": 1}
        env.sim.clock.advance(3000)
        _, snap = env.poll()
        oldest = snap.cluster_max_active_transaction_duration_seconds
        assert oldest is not None and 3.0 <= oldest < 8.0  # the simulator's clock also runs
        assert snap.late_transactions == ()
    finally:
        txn.close_quietly()


@pytest.mark.parametrize("clock_offset_ms", [0, 50 * MINUTE_MS])
def test_a_producer_clock_50_minutes_fast_does_not_hide_a_hanging_transaction(
    env: PollEnv, clock_offset_ms: int
) -> None:
    """The same hanging transaction turns late at the same moment whatever the producer's
    clock says: a timestamp later than the first sighting is not used."""
    hanging_transaction(env.bootstrap, "hang-fast", "t", 0, backdate_ms=-clock_offset_ms,
                        now_ms=env.now_ms)
    obs, snap = env.poll()
    (txn,) = obs.open_transactions
    expected = (StartTimeSource.FIRST_SEEN if clock_offset_ms
                else StartTimeSource.BATCH_TIMESTAMP)
    assert txn.start_time_source is expected
    assert 0 <= obs.observed_at_ms - txn.start_time_ms < 5000  # never clamped to the future
    assert snap.late_transactions == ()
    env.sim.clock.advance((LATE_AFTER_SECONDS + 1) * 1000)
    _, snap = env.poll()
    (late,) = snap.late_transactions  # late 71 s after it was written, whatever its clock
    assert late.classification is Classification.HANGING
    assert LATE_AFTER_SECONDS < late.age_seconds < LATE_AFTER_SECONDS + 6
    assert snap.open_transactions_by_start_time_source == {expected.value: 1}


# -- unknown is absent, never 0 ----------------------------------------------------------------


def test_garbage_describe_producers_answer_makes_that_brokers_counts_unknown(
    env: PollEnv,
) -> None:
    bad = env.leader("t", 0)
    env.sim.fail_next_responses("malformed", broker_id=bad, api_key=DESCRIBE_PRODUCERS,
                                count=None)
    obs, snap = env.poll()
    brokers = by_broker(snap)
    assert brokers[bad].up  # it answers: only its producer state is unknown
    assert counts(brokers[bad]) == (None, None, None)
    assert all(counts(b) == (0, 0, 0) for b in snap.brokers if b.broker_id != bad)
    assert TopicPartition("t", 0) in obs.unobserved
    # No open transaction seen and a partition unobserved: the cluster maximum is unknown.
    assert snap.cluster_max_active_transaction_duration_seconds is None
    assert snap.unobserved_by_reason == {"error": snap.unobserved_partitions}
    assert any(e.api == "DescribeProducers" and e.error == "DECODE_ERROR"
               for e in obs.request_errors)
    env.sim.clear_faults()
    _, snap = env.poll()
    assert all(counts(b) == (0, 0, 0) for b in snap.brokers)
    assert snap.cluster_max_active_transaction_duration_seconds == 0.0


def test_no_broker_answering_makes_every_number_unknown(env: PollEnv) -> None:
    """With every broker down nothing was observed: the cluster maximum is unknown, not 0."""
    env.poll()
    for broker_id in env.sim.node_ids:
        env.sim.stop_broker(broker_id)
    _, snap = env.poll()
    assert not snap.up
    assert snap.cluster_max_active_transaction_duration_seconds is None
    assert all(counts(b) == (None, None, None) for b in snap.brokers)


@pytest.mark.parametrize(
    ("error_code", "reason"),
    [
        (UNKNOWN_SERVER_ERROR, UnobservedReason.ERROR),
        (NOT_LEADER_OR_FOLLOWER, UnobservedReason.NOT_LEADER),  # persistent: after the retry
        (TOPIC_AUTHORIZATION_FAILED, UnobservedReason.UNAUTHORIZED),
    ],
)
def test_per_partition_error_makes_the_leaders_counts_unknown(
    env: PollEnv, error_code: int, reason: UnobservedReason
) -> None:
    leader = env.leader("t", 1)
    env.sim.inject_error(DESCRIBE_PRODUCERS, error_code, topic="t", partition=1)
    obs, snap = env.poll()
    assert unobserved_reason(obs.unobserved[TopicPartition("t", 1)]) is reason
    assert snap.unobserved_by_reason == {reason.value: 1}
    assert counts(by_broker(snap)[leader]) == (None, None, None)
    assert snap.cluster_max_active_transaction_duration_seconds is None


def test_cluster_maximum_is_the_oldest_seen_while_another_partition_is_unobserved(
    env: PollEnv,
) -> None:
    """A lower bound is still true: an observed hanging transaction is never hidden."""
    hanging_transaction(env.bootstrap, "hang-seen", "t", 0, backdate_ms=30 * MINUTE_MS,
                        now_ms=env.now_ms)
    env.sim.inject_error(DESCRIBE_PRODUCERS, UNKNOWN_SERVER_ERROR, topic="t", partition=2)
    _, snap = env.poll()
    oldest = snap.cluster_max_active_transaction_duration_seconds
    assert oldest is not None and oldest >= 30 * 60
    assert by_broker(snap)[env.leader("t", 0)].partitions_with_hanging_transactions == (
        None if env.leader("t", 0) == env.leader("t", 2) else 1)


def test_hanging_count_is_unknown_while_coordinators_are_loading(env: PollEnv) -> None:
    leader = env.leader("t", 0)
    hanging_transaction(env.bootstrap, "hang-load", "t", 0, backdate_ms=30 * MINUTE_MS,
                        now_ms=env.now_ms)
    env.sim.inject_error(LIST_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS)
    obs, snap = env.poll()
    assert not obs.coordinator_view_complete
    (late,) = snap.late_transactions
    assert late.classification is Classification.UNKNOWN
    assert counts(by_broker(snap)[leader]) == (1, 1, None)  # late is known, hanging is not
    env.sim.clear_errors()
    _, snap = env.poll()
    assert counts(by_broker(snap)[leader]) == (1, 1, 1)


def test_partition_left_out_of_the_answer_is_unobserved() -> None:
    """A DescribeProducers answer without a requested partition is not "no transaction"."""
    from collect_fakes import FakeCluster, Producer

    fake = FakeCluster(node_ids=[1, 2])
    fake.leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2, ("__transaction_state", 0): 1}
    fake.max_timeout_ms = {1: 60_000, 2: 60_000}
    fake.producers[("t", 1)] = [Producer(producer_id=9, start_offset=4, last_timestamp=1)]
    fake.omit_from_describe_producers.add(("t", 1))
    sim = SimCluster(node_ids=fake.node_ids, dispatcher=fake).start()
    try:
        from exporter.observe import ClusterObserver
        from exporter.settings import ClusterSettings

        settings = ClusterSettings(name="fake", request_timeout_seconds=2.0,
                                   bootstrap_servers=tuple(sim.bootstrap_servers.split(",")))
        poller = ClusterObserver(settings)
        try:
            obs = poller.poll()
        finally:
            poller.close()
    finally:
        sim.close()
    assert obs.open_transactions == ()
    assert obs.unobserved == {TopicPartition("t", 1): "MISSING_FROM_ANSWER"}
    assert any(e.broker_id == 1 and e.error == "MISSING_FROM_ANSWER" for e in obs.request_errors)
    snap = analyze(obs, settings)
    assert counts(by_broker(snap)[1]) == (None, None, None)
    assert counts(by_broker(snap)[2]) == (0, 0, 0)
    assert snap.cluster_max_active_transaction_duration_seconds is None
    assert snap.unobserved_by_reason == {"error": 1}


def test_on_metrics_the_unknown_numbers_are_absent_not_zero() -> None:
    """End to end through `serve()`: a broker answering DescribeProducers with garbage keeps
    `broker_up 1`, but its open/late/hanging counts and the cluster maximum have no series,
    and the partition is counted as unobserved; all come back once it answers properly."""
    from resilience.harness import cluster_settings as serve_settings
    from resilience.harness import in_process_exporter

    with SimCluster(brokers=3, topics={"t": 3}, broker_config=CAPTURE_BROKER_CONFIG) as sim:
        bad = int(sim.call(lambda: sim.state.partition("t", 0).leader_id))
        sim.fail_next_responses("malformed", broker_id=bad, api_key=DESCRIBE_PRODUCERS,
                                count=None)
        with in_process_exporter(serve_settings(sim)) as scraper:
            scraper.wait_for(lambda: scraper.value("kafka_txn_exporter_up") == 1, "a poll")
            samples = scraper.samples()
            names_for_bad = {n for (n, labels), _ in samples.items()
                             if ("broker", str(bad)) in labels}
            assert "kafka_txn_exporter_broker_up" in names_for_bad
            assert scraper.value("kafka_txn_exporter_broker_up", broker=str(bad)) == 1
            for name in ("kafka_partitions_with_open_transactions",
                         "kafka_partitions_with_late_transactions",
                         "kafka_partitions_with_hanging_transactions"):
                assert name not in names_for_bad
                assert scraper.value(name) == 0.0  # the other brokers: known, and none
            assert scraper.value("kafka_cluster_max_active_transaction_duration_seconds") is None
            assert (scraper.value("kafka_txn_exporter_unobserved_partitions_by_reason",
                                  reason="error") or 0) >= 1
            sim.clear_faults()
            scraper.wait_for(
                lambda: scraper.value("kafka_partitions_with_open_transactions",
                                      broker=str(bad)) == 0
                and scraper.value("kafka_cluster_max_active_transaction_duration_seconds")
                == 0.0, "every number known again")
