"""The custom collector's exposition, parsed back with prometheus_client.parser."""

from __future__ import annotations

import platform
from collections.abc import Mapping

from exporter_factories import broker, late, open_txn, snapshot
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from exporter import __version__
from exporter.expose.collector import SnapshotCollector
from exporter.model import Classification, RequestError, TopicPartition
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore
from exporter.version import revision

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def cluster(name: str = "c1", labels: Mapping[str, str] | None = None) -> ClusterSettings:
    return ClusterSettings(name=name, bootstrap_servers=("h:1",), labels=dict(labels or {}))


def scrape(store: SnapshotStore) -> Samples:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    text = generate_latest(registry).decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for n, labels in samples if n == name]


def test_before_first_poll_up_is_0_and_no_data_series() -> None:
    samples = scrape(SnapshotStore([cluster("c1")]))
    assert get(samples, "kafka_txn_exporter_up", cluster="c1") == 0
    assert get(samples, "kafka_txn_exporter_build_info", version=__version__,
               revision=revision(), python_version=platform.python_version()) == 1
    assert get(samples, "kafka_txn_exporter_poll_interval_seconds", cluster="c1") == 30.0
    assert not {n for n in names(samples) if n.startswith("kafka_") and "exporter" not in n}
    assert "kafka_txn_exporter_last_successful_poll_timestamp_seconds" not in names(samples)


def test_snapshot_metrics_and_labels() -> None:
    store = SnapshotStore([cluster("c1")])
    hanging = open_txn("hang-test", 0, leader_id=1, producer_id=3, start_offset=0, age_ms=400_000)
    tracked = open_txn("txn-open", 1, leader_id=2, producer_id=2, producer_epoch=1,
                       coordinator_epoch=4, start_offset=17, age_ms=200_000)
    store.publish(snapshot(
        "c1",
        brokers=[broker(1, open_=2, late_=1, hanging=1, max_timeout_ms=60_000),
                 broker(2, open_=1, late_=1, max_timeout_ms=900_000)],
        durations={TopicPartition("hang-test", 0): 400.0, TopicPartition("txn-open", 1): 200.0},
        late_transactions=[
            late(hanging, Classification.HANGING, ""),
            late(tracked, Classification.COORDINATOR_TRACKED, "tx-open-1"),
        ],
        transaction_states={"Ongoing": 1, "Empty": 2},
        lso_lag={TopicPartition("hang-test", 0): 1},
        unobserved=3,
    ), now_seconds=1234.5)
    s = scrape(store)
    assert get(s, "kafka_txn_exporter_up", cluster="c1") == 1
    assert get(s, "kafka_partition_max_active_transaction_duration_seconds",
               cluster="c1", topic="hang-test", partition="0") == 400.0
    assert len(series(s, "kafka_partition_max_active_transaction_duration_seconds")) == 2
    assert get(s, "kafka_cluster_max_active_transaction_duration_seconds", cluster="c1") == 400.0
    assert get(s, "kafka_partitions_with_late_transactions", cluster="c1", broker="1") == 1
    assert get(s, "kafka_partitions_with_hanging_transactions", cluster="c1", broker="1") == 1
    assert get(s, "kafka_partitions_with_hanging_transactions", cluster="c1", broker="2") == 0
    assert get(s, "kafka_partitions_with_open_transactions", cluster="c1", broker="1") == 2
    assert get(s, "kafka_late_transaction_age_seconds", cluster="c1", topic="hang-test",
               partition="0", producer_id="3", producer_epoch="0", coordinator_epoch="-1",
               start_offset="0", transactional_id="", classification="hanging",
               application="") == 400.0
    assert get(s, "kafka_late_transaction_age_seconds", cluster="c1", topic="txn-open",
               partition="1", producer_id="2", producer_epoch="1", coordinator_epoch="4",
               start_offset="17", transactional_id="tx-open-1",
               classification="coordinator_tracked", application="") == 200.0
    assert get(s, "kafka_transactions", cluster="c1", state="Ongoing") == 1
    assert get(s, "kafka_transactions", cluster="c1", state="Empty") == 2
    assert get(s, "kafka_transaction_max_timeout_seconds", cluster="c1", broker="1") == 60.0
    assert get(s, "kafka_transaction_max_timeout_seconds", cluster="c1", broker="2") == 900.0
    assert get(s, "kafka_partition_last_stable_offset_lag",
               cluster="c1", topic="hang-test", partition="0") == 1
    assert get(s, "kafka_txn_exporter_unobserved_partitions", cluster="c1") == 3
    assert get(s, "kafka_txn_exporter_broker_up", cluster="c1", broker="2") == 1
    assert get(s, "kafka_txn_exporter_last_successful_poll_timestamp_seconds",
               cluster="c1") == 1234.5


def test_down_broker_has_no_data_series_but_broker_up_0() -> None:
    """Missing data is never reported as zero: a broker with up=False is absent."""
    store = SnapshotStore([cluster("c1")])
    store.publish(snapshot("c1", brokers=[broker(1), broker(2, up=False, max_timeout_ms=None)]))
    s = scrape(store)
    assert series(s, "kafka_partitions_with_late_transactions") == [
        {"cluster": "c1", "broker": "1"}
    ]
    assert get(s, "kafka_partitions_with_late_transactions", cluster="c1", broker="1") == 0
    assert series(s, "kafka_partitions_with_open_transactions") == [
        {"cluster": "c1", "broker": "1"}
    ]
    assert get(s, "kafka_txn_exporter_broker_up", cluster="c1", broker="2") == 0
    assert series(s, "kafka_transaction_max_timeout_seconds") == [{"cluster": "c1", "broker": "1"}]


def test_transactions_by_state_absent_when_unknown() -> None:
    store = SnapshotStore([cluster("c1")])
    store.publish(snapshot("c1", brokers=[broker(1)], transaction_states=None))
    assert "kafka_transactions" not in names(scrape(store))


def test_series_vanish_when_transaction_ends() -> None:
    store = SnapshotStore([cluster("c1")])
    txn = open_txn("t", 0)
    store.publish(snapshot("c1", brokers=[broker(1, open_=1, late_=1, hanging=1)],
                           durations={TopicPartition("t", 0): 400.0},
                           late_transactions=[late(txn)]))
    assert series(scrape(store), "kafka_late_transaction_age_seconds")
    store.publish(snapshot("c1", brokers=[broker(1)]))
    s = scrape(store)
    assert not series(s, "kafka_late_transaction_age_seconds")
    assert not series(s, "kafka_partition_max_active_transaction_duration_seconds")
    assert get(s, "kafka_partitions_with_late_transactions", cluster="c1", broker="1") == 0
    assert get(s, "kafka_cluster_max_active_transaction_duration_seconds", cluster="c1") == 0


def test_static_labels_on_every_series_of_that_cluster_only() -> None:
    store = SnapshotStore([cluster("c1", {"env": "prod"}), cluster("c2")])
    store.publish(snapshot("c1", brokers=[broker(1)],
                           durations={TopicPartition("t", 0): 70.0}))
    store.publish(snapshot("c2", brokers=[broker(1)]))
    s = scrape(store)
    for (name, labels) in s:
        label_map = dict(labels)
        if label_map.get("cluster") == "c1":
            assert label_map.get("env") == "prod", name
        elif label_map.get("cluster") == "c2":
            assert "env" not in label_map, name
    assert get(s, "kafka_partition_max_active_transaction_duration_seconds",
               cluster="c1", topic="t", partition="0", env="prod") == 70.0


def test_request_errors_counter_and_poll_histogram_accumulate() -> None:
    store = SnapshotStore([cluster("c1")])
    err = RequestError(broker_id=2, api="DescribeProducers", error="NOT_LEADER_OR_FOLLOWER")
    store.publish(snapshot("c1", brokers=[broker(1)], request_errors=[err, err]),
                  duration_seconds=0.3)
    store.publish(snapshot("c1", brokers=[broker(1)], request_errors=[err]),
                  duration_seconds=7.0)
    s = scrape(store)
    assert get(s, "kafka_txn_exporter_request_errors_total", cluster="c1", broker="2",
               api="DescribeProducers", error="NOT_LEADER_OR_FOLLOWER") == 3
    assert get(s, "kafka_txn_exporter_poll_duration_seconds_count", cluster="c1") == 2
    assert get(s, "kafka_txn_exporter_poll_duration_seconds_sum", cluster="c1") == 7.3
    assert get(s, "kafka_txn_exporter_poll_duration_seconds_bucket", cluster="c1", le="0.5") == 1
    assert get(s, "kafka_txn_exporter_poll_duration_seconds_bucket", cluster="c1", le="10.0") == 2
    assert get(s, "kafka_txn_exporter_poll_duration_seconds_bucket", cluster="c1", le="+Inf") == 2


def test_failed_poll_drops_data_keeps_up_0_and_last_success() -> None:
    store = SnapshotStore([cluster("c1")])
    store.publish(snapshot("c1", brokers=[broker(1)], durations={TopicPartition("t", 0): 99.0}),
                  now_seconds=50.0)
    store.record_failure("c1", "ConnectionError: boom", 1.0)
    s = scrape(store)
    assert get(s, "kafka_txn_exporter_up", cluster="c1") == 0
    assert get(s, "kafka_txn_exporter_last_successful_poll_timestamp_seconds", cluster="c1") == 50
    assert not series(s, "kafka_partition_max_active_transaction_duration_seconds")
    assert not series(s, "kafka_partitions_with_late_transactions")
    assert get(s, "kafka_txn_exporter_poll_duration_seconds_count", cluster="c1") == 2
    assert store.not_ready() == []  # it did succeed once


def test_snapshot_with_cluster_down_exposes_no_data() -> None:
    store = SnapshotStore([cluster("c1")])
    store.publish(snapshot("c1", up=False, brokers=[broker(1, up=False)]))
    s = scrape(store)
    assert get(s, "kafka_txn_exporter_up", cluster="c1") == 0
    assert get(s, "kafka_txn_exporter_broker_up", cluster="c1", broker="1") == 0
    assert "kafka_cluster_max_active_transaction_duration_seconds" not in names(s)
    assert store.not_ready() == ["c1"]


def test_openmetrics_exposition_is_valid() -> None:
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    store = SnapshotStore([cluster("c1")])
    err = RequestError(broker_id=1, api="ListTransactions", error="COORDINATOR_LOAD_IN_PROGRESS")
    store.publish(snapshot("c1", brokers=[broker(1)], request_errors=[err]))
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    families = {f.name: f for f in om_parse(om_latest(registry).decode())}
    assert families["kafka_txn_exporter_request_errors"].type == "counter"
    assert families["kafka_txn_exporter_poll_duration_seconds"].type == "histogram"


def test_unobservable_broker_counts_absent_and_unobserved_by_reason() -> None:
    """A broker without DescribeProducers (Kafka < 2.8) is up but its counts are unknown."""
    store = SnapshotStore([cluster("c1")])
    store.publish(snapshot("c1", brokers=[broker(1), broker(2, observable=False)],
                           unobserved=5, unobserved_by_reason={"unsupported_api": 4,
                                                               "unauthorized": 1}))
    s = scrape(store)
    assert get(s, "kafka_txn_exporter_broker_up", cluster="c1", broker="2") == 1
    for name in ("kafka_partitions_with_late_transactions",
                 "kafka_partitions_with_hanging_transactions",
                 "kafka_partitions_with_open_transactions"):
        assert series(s, name) == [{"cluster": "c1", "broker": "1"}], name
    assert get(s, "kafka_txn_exporter_unobserved_partitions", cluster="c1") == 5
    assert get(s, "kafka_txn_exporter_unobserved_partitions_by_reason", cluster="c1",
               reason="unsupported_api") == 4
    assert get(s, "kafka_txn_exporter_unobserved_partitions_by_reason", cluster="c1",
               reason="unauthorized") == 1
