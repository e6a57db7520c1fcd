"""The simulator answers to the real broker, live.

The capture scenarios of tests/data/real-kafka-4.0 (topics; committed, open and hanging
transactions; errors: unknown topic, unknown partition, unknown transactional id, a bad state
filter, unsupported versions) and tests/data/real-kafka-4.0-groups (consumer groups behind a
hanging transaction, a compacted topic) run on a fresh real broker of each version of the
matrix and on a fresh simulator with that version's profile (conformance.live.SIM_PROFILE_FOR).
Every captured request is sent, as recorded, to both; every answer of the simulator is compared
with the broker's field by field. Allowed differences: conformance.live.LIVE_NORMALISATIONS.
TIMEOUT runs shortened (a 1 s transaction timeout, 1.5 s on); FINAL (50-54) waits 80 s for a
60 s timeout and stays covered by the frozen captures (tests/conformance) and
scripts/refresh-captures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conformance.live import (
    EXPORTER_REQUESTS,
    LIVE_BROKER_CONFIG,
    LIVE_GROUP_FILES,
    LIVE_NORMALISATIONS,
    LIVE_TOPICS,
    LIVE_TXN_FILES,
    LiveAnswer,
    LiveBroker,
    LiveRun,
    broker_properties,
    compare_exporter_requests,
    compare_live,
    live_rules,
    run_live,
    send_exporter_requests,
    sim_profile_for,
)
from conformance.replay import NODE_ID
from kafka_sim.realkafka import start_cluster

TXN_FILES, GROUP_FILES = LIVE_TXN_FILES, LIVE_GROUP_FILES


@dataclass
class Live:
    version: str
    profile: str
    real: LiveRun
    sim: LiveRun
    answers: dict[str, LiveAnswer]
    exporter: dict[str, LiveAnswer]
    """The exporter's own requests (exporter/collect/client.py builders), by name."""
    seconds: float
    """Broker start, both scenarios and the comparison (budget: 30 s per version)."""


@pytest.fixture(scope="module")
def live(kafka_version: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One fresh broker (the capture's settings) and one fresh simulator per version."""
    from kafka_sim.cluster import SimCluster

    started = time.monotonic()
    workdir = tmp_path_factory.mktemp(f"live-{kafka_version}")
    real = start_cluster(kafka_version, workdir, broker_config=LIVE_BROKER_CONFIG)
    try:
        real_run = run_live(LiveBroker(real), create_topics=True)
        real_exporter = send_exporter_requests(real_run)
    finally:
        real.stop()
    profile = sim_profile_for(kafka_version)
    with SimCluster(
        brokers=1,
        node_ids=[NODE_ID],
        topics=LIVE_TOPICS,
        broker_config=broker_properties(real),
        profile=profile,
    ) as sim:
        sim_run = run_live(sim, create_topics=False)
        sim_exporter = send_exporter_requests(sim_run)
    answers = compare_live(real_run, sim_run, profile)
    exporter = compare_exporter_requests(real_run, sim_run, real_exporter, sim_exporter, profile)
    yield Live(
        kafka_version, profile, real_run, sim_run, answers, exporter,
        time.monotonic() - started,
    )  # fmt: skip


def test_both_sides_ran_the_scenario(live: Live) -> None:
    assert live.real.step_errors == [], "\n".join(live.real.step_errors)
    assert live.sim.step_errors == [], "\n".join(live.sim.step_errors)
    assert sorted(live.answers) == sorted(TXN_FILES + GROUP_FILES)
    # The same producer ids on both sides: the scenario allocated them in the same order.
    assert live.real.txn.facts.hang is not None and live.sim.txn.facts.hang is not None
    assert live.real.txn.facts.hang[0] == live.sim.txn.facts.hang[0] == 3


@pytest.mark.parametrize("file", TXN_FILES + GROUP_FILES)
def test_simulator_answers_like_the_real_broker(live: Live, file: str) -> None:
    answer = live.answers[file]
    assert not answer.problems, (
        f"Kafka {live.version} vs simulator profile {live.profile}, {file}:\n"
        + "\n".join(answer.problems)
    )


@pytest.mark.parametrize("name", EXPORTER_REQUESTS)
def test_the_exporters_own_requests_are_answered_alike(live: Live, name: str) -> None:
    """Every API the exporter sends, built by its own code at the version it negotiates with
    each side (the same, since the profile's ApiVersions are the broker's), after both
    scenarios: the simulator's answer field by field against the broker's."""
    assert sorted(live.exporter) == sorted(EXPORTER_REQUESTS)
    answer = live.exporter[name]
    assert not answer.problems, (
        f"Kafka {live.version} vs simulator profile {live.profile}, {answer.file}:\n"
        + "\n".join(answer.problems)
    )


def test_unsupported_versions_are_refused_alike(live: Live) -> None:
    """DescribeProducers v5 (40) closes the connection on every version; on 3.9, which has no
    Metadata v13, so does 04 (and the replay learns the topic ids with v12)."""
    for side in (live.real, live.sim):
        assert side.txn.exchanges["40-error-describeproducers-v5-unsupported.json"].closed
        closed = side.txn.exchanges["04-metadata-v13-topics.json"].closed
        assert closed == (live.profile == "3.9")
        assert sorted(side.txn.facts.sim_topic_ids) == ["hang-test", "txn-committed", "txn-open"]


def test_every_rule_is_a_listed_normalisation(live: Live) -> None:
    listed = {name for name, _ in LIVE_NORMALISATIONS}
    used = {
        r.name
        for f in ("06-describeconfigs-v4-broker-all.json",)
        for r in live_rules(live.real, live.sim, 32, f, "4.4")
    }
    used |= {r.name for r in live_rules(live.real, live.sim, 32, "07", "4.4")}
    used |= {r.name for r in live_rules(live.real, live.sim, 15)}
    used |= {r.name for r in live_rules(live.real, live.sim, 3, "", "2.8")}  # ZooKeeper mode
    used.add("L7 record batch crc")  # inside L8: the decoded batches' own rules
    assert used == listed
