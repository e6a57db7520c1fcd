"""`ClusterObservation.poll_phase_seconds` and its metric,
`kafka_txn_exporter_poll_phase_duration_seconds`: a broker slow to answer one API shows up in
the phase that sends it, not in the phases before or after it; a phase the poll did not reach
has no value (never 0)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from simhelpers import CAPTURE_BROKER_CONFIG, cluster_poller, cluster_settings

from exporter.analyze import analyze
from exporter.collect.poll import ClusterPoller
from exporter.expose.collector import SnapshotCollector
from exporter.expose.registry import ExporterRegistry
from exporter.model import PollPhase
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

METADATA, LIST_OFFSETS, FETCH, LIST_GROUPS = 3, 2, 1, 16
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
LATENCY_MS = 1_000
PHASE_METRIC = "kafka_txn_exporter_poll_phase_duration_seconds"

TOGETHER = (
    {PollPhase.LIST_TRANSACTIONS, PollPhase.DESCRIBE_PRODUCERS, PollPhase.BROKER_CONFIGS},
    {PollPhase.START_TIMES, PollPhase.LIST_OFFSETS},
    {PollPhase.TOPIC_CONFIGS, PollPhase.CONSUMER_GROUPS},
)
"""Phases sent at the same time. A broker answers a connection's requests in order
(docs/kafka-semantics.md#wire-behaviour), so a slow answer also holds up a request sent behind
it on the same connection by a phase running at the same time (measured: `broker_configs`
beside a slow `describe_producers`): only phases that do not run alongside the slow one are
asserted unaffected."""

COLLECT_PHASES = {p.value for p in PollPhase if p is not PollPhase.ANALYZE}


def _alongside(phase: PollPhase) -> set[PollPhase]:
    return next((group for group in TOGETHER if phase in group), {phase})


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    """One late (hanging) transaction with records behind it: every phase has something to
    ask (its start time, its offsets, its coordinator, its topic's config, the groups)."""
    with SimCluster(brokers=3, topics={"t": 3}, broker_config=CAPTURE_BROKER_CONFIG) as cluster:
        hanging_transaction(cluster.bootstrap_servers, "phases-hang", "t", 1,
                            backdate_ms=400_000)
        yield cluster


@pytest.mark.parametrize(("api_key", "phase"), [
    (METADATA, PollPhase.METADATA),
    (DESCRIBE_PRODUCERS, PollPhase.DESCRIBE_PRODUCERS),
    (FETCH, PollPhase.START_TIMES),
    (DESCRIBE_TRANSACTIONS, PollPhase.DESCRIBE_TRANSACTIONS),
    (LIST_GROUPS, PollPhase.CONSUMER_GROUPS),
], ids=lambda v: v.value if isinstance(v, PollPhase) else str(v))
def test_a_slow_api_shows_in_its_phase_and_not_in_the_phases_before_or_after_it(
    sim: SimCluster, api_key: int, phase: PollPhase
) -> None:
    # A fresh poller: nothing cached, so every phase sends its requests in this one poll.
    settings = cluster_settings(sim, f"phases-{phase.value}")
    sim.set_latency(LATENCY_MS, api_key=api_key)
    try:
        with cluster_poller(sim, settings) as poller:
            obs = poller.poll()
    finally:
        sim.set_latency(0, api_key=api_key)
    seconds = obs.poll_phase_seconds
    assert set(seconds) == COLLECT_PHASES, seconds
    assert seconds[phase.value] >= LATENCY_MS / 1000, seconds
    unaffected = {p.value for p in PollPhase} - {p.value for p in _alongside(phase)}
    slow_elsewhere = {p: s for p, s in seconds.items() if p in unaffected and s >= 0.9}
    assert not slow_elsewhere, seconds
    # The slow phase is inside the poll's own duration (wall time, not a sum).
    assert seconds[phase.value] <= obs.poll_duration_seconds


def _phase_series(store: SnapshotStore) -> dict[str, float]:
    registry = ExporterRegistry()
    registry.register(SnapshotCollector(store))
    text = generate_latest(registry).decode()
    return {
        sample.labels["phase"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == PHASE_METRIC
        for sample in family.samples
    }


def test_a_poll_whose_metadata_fails_reports_that_phase_only_and_a_raised_one_none() -> None:
    # A closed port: no broker answers Metadata, the poll stops there.
    settings = ClusterSettings(name="down", bootstrap_servers=("127.0.0.1:1",),
                               request_timeout_seconds=1.0)
    poller = ClusterPoller(settings)
    try:
        obs = poller.poll()
    finally:
        poller.close()
    assert set(obs.poll_phase_seconds) == {PollPhase.METADATA.value}
    snapshot = analyze(obs, settings)
    assert not snapshot.up
    store = SnapshotStore([settings])
    store.publish(snapshot, analyze_seconds=0.001)
    # The phases it did not reach have no series at all (never 0).
    assert set(_phase_series(store)) == {"metadata", "analyze"}
    store.record_failure("down", "RuntimeError: boom", 0.5)
    assert _phase_series(store) == {}
