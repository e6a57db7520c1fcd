"""The simulator's release profiles answer as live ZooKeeper-mode brokers of that release.

The live comparison of test_live_conformance.py (the capture scenarios of
tests/data/real-kafka-4.0 and tests/data/real-kafka-4.0-groups, sent as recorded to a fresh real
broker and to a fresh simulator, every answer compared field by field under
conformance.live.LIVE_NORMALISATIONS), run on each ZooKeeper-mode release of
scripts/kafka-zk-versions against the simulator's profile recorded from that release's live
broker. One fresh ZooKeeper-mode broker per version, shared by this module: fresh, because the
scenario needs the producer ids and topic names of a new cluster, which the shared
`real_zk_kafka` broker of the focused set has spent.

A captured request at a version the release does not offer closes the connection on both sides
(compared as such). What the exporter depends on is asked again at the version the exporter
itself negotiates with that release: Metadata, DescribeCluster, DescribeProducers,
ListTransactions and DescribeTransactions (from 3.0; a 2.8 broker does not offer them, and the
exporter sends them on neither side), FindCoordinator, DescribeConfigs, ListGroups, OffsetFetch,
ListOffsets in both isolation levels and Fetch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from conformance.live import (
    EXPORTER_REQUESTS,
    LIVE_BROKER_CONFIG,
    LIVE_GROUP_FILES,
    LIVE_TOPICS,
    LIVE_TXN_FILES,
    LiveAnswer,
    LiveBroker,
    LiveRun,
    broker_properties,
    compare_exporter_requests,
    compare_live,
    run_live,
    send_exporter_requests,
)
from conformance.replay import NODE_ID
from kafka_sim.realkafka import start_cluster
from realhelpers import kafka_zk_versions

TXN_FILES, GROUP_FILES = LIVE_TXN_FILES, LIVE_GROUP_FILES

ZK_SIM_PROFILE = {"2.8": "2.8", "3.0": "3.0", "3.5": "3.5", "3.6": "3.6"}
EXPECTED_ANSWERED = {"2.8": 24, "3.0": 36, "3.5": 36, "3.6": 36}
"""Of the 64 captured exchanges (recorded at 4.0's versions), how many the release answers: the
rest it refuses, on both sides alike."""
"""major.minor of a ZooKeeper-mode release -> the simulator's release profile judged by it."""


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = (int(part) for part in version.split(".")[:2])
    return major, minor


@dataclass
class ZkLive:
    version: str
    profile: str
    real: LiveRun
    sim: LiveRun
    answers: dict[str, LiveAnswer]
    exporter: dict[str, LiveAnswer]
    seconds: float
    """Broker (and ZooKeeper) start, both scenarios and the comparison."""


@pytest.fixture(scope="module", params=kafka_zk_versions())
def zk_live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ZkLive]:
    from kafka_sim.cluster import SimCluster

    version: str = request.param
    started = time.monotonic()
    workdir = tmp_path_factory.mktemp(f"live-zk-{version}")
    config = dict(LIVE_BROKER_CONFIG)
    if _major_minor(version) < (3, 6):
        del config["transaction.partition.verification.enable"]  # the setting arrives in 3.6
    real = start_cluster(version, workdir, broker_config=config, zookeeper=True)
    try:
        real_run = run_live(LiveBroker(real), create_topics=True)
        real_exporter = send_exporter_requests(real_run)
    finally:
        real.stop()
    profile = ZK_SIM_PROFILE[".".join(version.split(".")[:2])]
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
    yield ZkLive(
        version, profile, real_run, sim_run, answers, exporter, time.monotonic() - started
    )


def test_both_sides_ran_the_scenario(zk_live: ZkLive) -> None:
    assert zk_live.real.step_errors == [], "\n".join(zk_live.real.step_errors)
    assert zk_live.sim.step_errors == [], "\n".join(zk_live.sim.step_errors)
    assert sorted(zk_live.answers) == sorted(TXN_FILES + GROUP_FILES)
    assert zk_live.real.txn.facts.hang is not None and zk_live.sim.txn.facts.hang is not None
    assert zk_live.real.txn.facts.hang[0] == zk_live.sim.txn.facts.hang[0]


@pytest.mark.parametrize("file", TXN_FILES + GROUP_FILES)
def test_simulator_answers_like_the_real_broker(zk_live: ZkLive, file: str) -> None:
    answer = zk_live.answers[file]
    assert not answer.problems, (
        f"Kafka {zk_live.version} vs simulator profile {zk_live.profile}, {file}:\n"
        + "\n".join(answer.problems)
    )


@pytest.mark.parametrize("name", EXPORTER_REQUESTS)
def test_the_exporters_own_requests_are_answered_alike(zk_live: ZkLive, name: str) -> None:
    """Every API the exporter sends, built by its own code at the version it negotiates with
    the release (the same on both sides: the profile's ApiVersions are the broker's), after
    both scenarios; an API the release does not offer is left unsent on both sides."""
    assert sorted(zk_live.exporter) == sorted(EXPORTER_REQUESTS)
    answer = zk_live.exporter[name]
    assert not answer.problems, (
        f"Kafka {zk_live.version} vs simulator profile {zk_live.profile}, {answer.file}:\n"
        + "\n".join(answer.problems)
    )


API_VERSIONS = 18
"""ApiVersions at a version the broker lacks is answered (UNSUPPORTED_VERSION), not refused."""


def _refused(exchanges: Mapping[str, Any], file: str) -> bool:
    """The connection closed instead of an answer (a request at a version the broker lacks)."""
    exchange = exchanges[file]
    if exchange.response is not None:
        return False
    return bool(getattr(exchange, "closed", False)) or str(exchange.error).startswith(
        "connection closed"
    )


def test_what_the_release_lacks_is_refused_alike_and_the_rest_answered(zk_live: ZkLive) -> None:
    """Each captured request at a version outside the release's ApiVersions range (the
    transactions APIs 65 and 66 on 2.8, the topic-id Fetch before 3.1, the batched lookups
    before 3.0 ...) closes the connection on the broker and on the simulator alike; every
    other one is answered by both (and compared above)."""
    from kafka_sim.versions import PROFILES

    ranges = PROFILES[zk_live.profile].api_versions
    answered = 0
    for real, sim in ((zk_live.real.txn, zk_live.sim.txn),
                      (zk_live.real.groups, zk_live.sim.groups)):  # fmt: skip
        for file, capture in real.captures.items():
            if not capture.is_exchange or file not in real.exchanges:
                continue
            low, high = ranges.get(int(capture.api_key or -1), (0, -1))
            offered = low <= capture.request_version <= high or capture.api_key == API_VERSIONS
            real_exchanges: Mapping[str, Any] = real.exchanges
            sim_exchanges: Mapping[str, Any] = sim.exchanges
            assert _refused(real_exchanges, file) == (not offered), file
            assert _refused(sim_exchanges, file) == (not offered), file
            answered += offered
    assert answered == EXPECTED_ANSWERED[zk_live.profile]
