"""Blocked before late on a real broker: a transaction with a long timeout (10 min, tracked by its
coordinator, not late, not orphaned: a Flink sink's lingering transaction, its transactional id
Flink-shaped) stops read_committed consumers (kafka-python's and Kafka's own console consumer),
and the exporter reports them blocked, classified coordinator_tracked, with the application its
id names, at the first poll once the transaction is `blocked_groups_min_age_seconds` old; before
that it does not look the partition's groups up. Kafka's own tools are the oracle:
`kafka-consumer-groups.sh --describe` (committed offsets, log end), the broker's
LastStableOffsetLag gauge, `kafka-transactions.sh describe` (Ongoing, its timeout) and
`find-hanging` (not hanging). docs/kafka-semantics.md#blocked-before-late."""

from __future__ import annotations

from kafka_sim.consumer import READ_COMMITTED, READ_UNCOMMITTED, consume_and_commit
from kafka_sim.producer import committed_transaction, open_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import (
    TRANSACTIONS_COMMAND,
    create_topic,
    find_hanging,
    jmx_last_stable_offset_lag,
    poll_env,
    unique,
)
from realtools import console_consume, describe_groups, exposed_samples, poll_until

from exporter.model import Classification, ClusterObservation, ClusterSnapshot, TopicPartition

RECORDS_BEFORE = 3
RECORDS_AFTER = 4
LINGERING_TIMEOUT_MS = 600_000  # 10 min: within the brokers' default 15 min maximum
MIN_AGE_SECONDS = 20.0
WAIT_SECONDS = MIN_AGE_SECONDS + 240.0  # generous: console consumers on a busy machine


def _describe_transaction(cluster: RealKafkaCluster, tid: str) -> dict[str, str]:
    described = cluster.tool(
        TRANSACTIONS_COMMAND, "--bootstrap-server", cluster.bootstrap,
        "describe", "--transactional-id", tid,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    header, row = described.stdout.splitlines()[:2]
    # TopicPartitions is the last column and holds no spaces (comma-separated).
    return dict(zip(header.split(), row.split(), strict=True))


def test_a_lingering_transaction_blocks_read_committed_groups_long_before_it_is_late(
    real_kafka: RealKafkaCluster,
) -> None:
    bootstrap = real_kafka.bootstrap
    topic = create_topic(real_kafka, unique("lingering"), partitions=1)
    tp = TopicPartition(topic, 0)
    prefix = unique("clicks-sink")
    tid = f"{prefix}-0-1"  # Flink KafkaSink: <prefix>-<subtask>-<checkpoint>
    committed_transaction(bootstrap, unique("ling-before"), topic, {0: RECORDS_BEFORE})
    lingering = open_transaction(bootstrap, tid, topic, [0], records=2,
                                 transaction_timeout_ms=LINGERING_TIMEOUT_MS)
    try:
        start_offset = lingering.batches[0].base_offset
        committed_transaction(bootstrap, unique("ling-after"), topic, {0: RECORDS_AFTER})
        with poll_env(real_kafka, blocked_groups_min_age_seconds=MIN_AGE_SECONDS) as env:
            young_polls = 0

            def age_seconds(obs: ClusterObservation) -> float:
                (mine,) = [t for t in obs.open_transactions if t.topic == topic]
                return (obs.observed_at_ms - mine.start_time_ms) / 1000.0

            def looked_at(obs: ClusterObservation) -> bool:
                return obs.consumer_groups is not None and tp in obs.consumer_groups.partitions

            # Young: its partition's groups are not looked up (the shared cluster may hold
            # other tests' old transactions: only this partition is judged).
            obs, _ = env.poll()
            if age_seconds(obs) < MIN_AGE_SECONDS:
                young_polls += 1
                assert not looked_at(obs)

            python_rc, python_ru, java_rc = (unique(g) for g in ("ling-rc", "ling-ru", "ling-jrc"))
            rc = consume_and_commit(bootstrap, python_rc, topic, 0, isolation_level=READ_COMMITTED)
            consume_and_commit(bootstrap, python_ru, topic, 0, isolation_level=READ_UNCOMMITTED)
            # A generous idle timeout: joining its group takes seconds on a busy machine.
            printed = console_consume(real_kafka, topic, java_rc, READ_COMMITTED,
                                      timeout_ms=20_000)
            assert len(printed) == RECORDS_BEFORE == rc.records_read  # none past the open one

            # Kafka's own view: the groups' committed offsets, the LSO, the coordinator's.
            described = describe_groups(real_kafka, python_rc, python_ru, java_rc)
            committed = {}
            log_end = set()
            for group, rows in described.items():
                (row,) = [r for r in rows if (r.topic, r.partition) == (topic, 0)]
                committed[group] = row.current_offset
                log_end.add(row.log_end_offset)
            (high_watermark,) = log_end
            assert high_watermark is not None
            lso = high_watermark - jmx_last_stable_offset_lag(real_kafka, topic, 0)
            assert lso == start_offset < high_watermark
            assert committed == {python_rc: lso, java_rc: lso, python_ru: high_watermark}
            coordinator = _describe_transaction(real_kafka, tid)
            assert coordinator["TransactionState"] == "Ongoing"
            assert int(coordinator["TransactionTimeoutMs"]) == LINGERING_TIMEOUT_MS
            assert f"{topic}-0" in coordinator["TopicPartitions"].split(",")
            assert [h for h in find_hanging(real_kafka) if h.topic == topic] == []

            # Poll until the exporter reports the groups; every poll before the minimum age
            # leaves the partition alone, and the first poll past it reports them.
            polls_past_age = 0

            def reported(obs: ClusterObservation, snap: ClusterSnapshot) -> bool:
                nonlocal young_polls, polls_past_age
                if age_seconds(obs) < MIN_AGE_SECONDS:
                    young_polls += 1
                    assert not looked_at(obs)
                    return False
                polls_past_age += 1
                return any(b.transaction.topic == topic and b.blocked_groups
                           for b in snap.blocking_transactions)

            obs, snap, _ = poll_until(env, reported, timeout_s=WAIT_SECONDS, interval_s=1.0)
            assert polls_past_age == 1, "reported at the first poll past the minimum age"
            assert young_polls >= 1  # the "not read while young" half was exercised

            (blocking,) = [b for b in snap.blocking_transactions if b.transaction.topic == topic]
            assert blocking.classification is Classification.COORDINATOR_TRACKED
            assert not blocking.late
            assert (blocking.transactional_id, blocking.application) == (tid, prefix)
            assert blocking.transaction.current_txn_start_offset == lso
            assert {g.group_id: g.committed_offset for g in blocking.blocked_groups} == {
                python_rc: lso, java_rc: lso}
            assert blocking.blocked_groups_unknown is None
            assert [t for t in snap.late_transactions if t.transaction.topic == topic] == []
            assert [t for t in snap.orphaned_transactions if t.transaction.topic == topic] == []

            samples = exposed_samples(env, snap)
            groups = {
                labels["group"]: (labels["classification"], labels["application"],
                                  labels["transactional_id"])
                for name, labels, _ in samples
                if name == "kafka_consumer_group_blocked_seconds" and labels["topic"] == topic
            }
            assert groups == dict.fromkeys((python_rc, java_rc),
                                           ("coordinator_tracked", prefix, tid))
            (age,) = [value for name, labels, value in samples
                      if name == "kafka_blocking_transaction_age_seconds"
                      and labels["topic"] == topic]
            assert MIN_AGE_SECONDS <= age < LINGERING_TIMEOUT_MS / 1000

            # Once it ends, nothing blocks there any more.
            lingering.commit()
            poll_until(
                env,
                lambda _, snap: not any(
                    b.transaction.topic == topic for b in snap.blocking_transactions),
                timeout_s=WAIT_SECONDS, interval_s=1.0,
            )
    finally:
        lingering.close_quietly()
