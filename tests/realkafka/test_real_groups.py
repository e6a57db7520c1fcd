"""Consumer groups blocked by a late hanging transaction on a real broker: the exporter's verdict
against what real consumers do (kafka-python and Kafka's own Java console consumer, each
read_committed) and what Kafka's `kafka-consumer-groups.sh --describe` and the broker's
LastStableOffsetLag gauge say (docs/kafka-semantics.md#blocked-groups)."""

from __future__ import annotations

from kafka_sim.consumer import READ_COMMITTED, READ_UNCOMMITTED, commit_offset, consume_and_commit
from kafka_sim.producer import committed_transaction, hanging_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import (
    LATE_BACKDATE_MS,
    create_topic,
    jmx_last_stable_offset_lag,
    poll_env,
    unique,
)
from realtools import console_consume, describe_groups, exposed_samples

from exporter.model import TopicPartition

RECORDS_BEFORE = 5
RECORDS_AFTER = 4
LAGGING_OFFSET = 2


def test_groups_stopped_at_a_late_transactions_lso_are_blocked_and_no_others(
    real_kafka: RealKafkaCluster,
) -> None:
    bootstrap = real_kafka.bootstrap
    topic = create_topic(real_kafka, unique("blocked"), partitions=1)
    committed_transaction(bootstrap, unique("blocked-before"), topic, {0: RECORDS_BEFORE})
    producer_id, _, start_offset = hanging_transaction(
        bootstrap, unique("blocked-hang"), topic, 0, backdate_ms=LATE_BACKDATE_MS
    )
    # Committed records after the hanging one: the high watermark moves on, the LSO cannot.
    committed_transaction(bootstrap, unique("blocked-after"), topic, {0: RECORDS_AFTER})

    python_rc, python_ru, lagging, java_rc = (
        unique(name) for name in ("grp-rc", "grp-ru", "grp-lagging", "grp-console-rc")
    )
    rc = consume_and_commit(bootstrap, python_rc, topic, 0, isolation_level=READ_COMMITTED)
    ru = consume_and_commit(bootstrap, python_ru, topic, 0, isolation_level=READ_UNCOMMITTED)
    commit_offset(bootstrap, lagging, topic, 0, LAGGING_OFFSET)
    printed = console_consume(real_kafka, topic, java_rc, READ_COMMITTED)
    # read_committed delivers the committed records before the hanging batch, none after it.
    assert len(printed) == RECORDS_BEFORE, printed
    assert rc.records_read == RECORDS_BEFORE

    # Kafka's own view: committed offsets and log end offsets, and the broker's LSO lag gauge.
    described = describe_groups(real_kafka, python_rc, python_ru, lagging, java_rc)
    committed = {}
    log_end = set()
    for group, rows in described.items():
        (row,) = [r for r in rows if (r.topic, r.partition) == (topic, 0)]
        committed[group] = row.current_offset
        log_end.add(row.log_end_offset)
    (high_watermark,) = log_end
    assert high_watermark is not None
    lso = high_watermark - jmx_last_stable_offset_lag(real_kafka, topic, 0)
    # The hanging transaction holds the LSO at its first offset.
    assert lso == start_offset == rc.end_offset < high_watermark
    assert committed == {
        python_rc: lso,
        java_rc: lso,
        python_ru: high_watermark,
        lagging: LAGGING_OFFSET,
    }
    expected_blocked = {g for g, offset in committed.items() if offset == lso < high_watermark}
    assert ru.committed_offset == high_watermark

    with poll_env(real_kafka) as env:
        observation, snapshot = env.poll()

    tp = TopicPartition(topic, 0)
    assert observation.high_watermarks[tp] == high_watermark
    assert observation.last_stable_offsets[tp] == lso
    (late,) = [t for t in snapshot.late_transactions if t.transaction.topic == topic]
    assert late.transaction.producer_id == producer_id
    assert late.blocked_groups_unknown is None
    blocked = {g.group_id: g.committed_offset for g in late.blocked_groups}
    assert blocked == dict.fromkeys(expected_blocked, lso)
    assert blocked.keys() == {python_rc, java_rc}

    samples = exposed_samples(env, snapshot)
    counts = [
        value
        for name, labels, value in samples
        if name == "kafka_transaction_blocked_consumer_groups" and labels.get("topic") == topic
    ]
    assert counts == [len(expected_blocked)]
    blocked_series = {
        labels["group"]
        for name, labels, _ in samples
        if name == "kafka_consumer_group_blocked_seconds" and labels.get("topic") == topic
    }
    assert blocked_series == expected_blocked
