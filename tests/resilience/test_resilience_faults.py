"""The daemon against a faulty simulated cluster: it keeps running, reports honestly (absent
series, broker_up 0, error counters; never a false "no transactions") and recovers when the
fault ends. Each test runs the real scheduler + ClusterPoller + HTTP server in-process
(`exporter.app.serve`) and reads everything through /metrics over HTTP.

The cluster holds one hanging transaction (made like the real capture's hang-1, see
tests/test_e2e_serve.py) on t-1, so "the data is back" is checkable: its
kafka_late_transaction_age_seconds series with classification="hanging".
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction

from exporter.scheduler import ClusterJob, make_cluster_job
from exporter.settings import ClusterSettings
from resilience.harness import Scraper, cluster_settings, in_process_exporter

pytestmark = pytest.mark.slow  # waits out timeouts and poll intervals on purpose

BROKER_CONFIG = {
    "transaction.max.timeout.ms": "60000",
    "transaction.partition.verification.enable": "false",
}
HANG_ID = "res-hang-1"
METADATA, LIST_TRANSACTIONS, DESCRIBE_TRANSACTIONS, DESCRIBE_PRODUCERS = 3, 66, 65, 61
NOT_LEADER_OR_FOLLOWER, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR = 6, 14, 16


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=3, topics={"t": 3}, broker_config=BROKER_CONFIG) as cluster:
        hanging_transaction(cluster.bootstrap_servers, HANG_ID, "t", 1, backdate_ms=400_000)
        yield cluster


def leader_of(sim: SimCluster, topic: str, partition: int) -> int:
    return int(sim.call(lambda: sim.state.partition(topic, partition).leader_id))


def hanging(scraper: Scraper) -> float | None:
    return scraper.value("kafka_late_transaction_age_seconds", topic="t", partition="1",
                         classification="hanging")


def classification(scraper: Scraper) -> set[str]:
    return {dict(labels)["classification"] for (name, labels) in scraper.samples()
            if name == "kafka_late_transaction_age_seconds"}


def errors(scraper: Scraper, **labels: str) -> float:
    return scraper.value("kafka_txn_exporter_request_errors_total", **labels) or 0.0


def wait_healthy(scraper: Scraper) -> None:
    """Every broker up, the hanging transaction reported: the normal state."""
    scraper.wait_for(lambda: hanging(scraper) is not None
                     and scraper.value("kafka_txn_exporter_up") == 1
                     and all(scraper.value("kafka_txn_exporter_broker_up", broker=str(b)) == 1
                             for b in (1, 2, 3)), "a healthy poll")


def test_broker_down_is_reported_and_recovered(sim: SimCluster) -> None:
    leader = leader_of(sim, "t", 1)
    with in_process_exporter(cluster_settings(sim)) as scraper:
        wait_healthy(scraper)
        sim.stop_broker(leader)
        scraper.wait_for(lambda: scraper.value("kafka_txn_exporter_broker_up",
                                               broker=str(leader)) == 0, "broker_up 0")
        s = scraper.samples()
        assert scraper.value("kafka_txn_exporter_up") == 1  # the others still answer
        # Its partition (single replica) has no leader: unknown, not "no transaction".
        assert hanging(scraper) is None
        assert (scraper.value("kafka_txn_exporter_unobserved_partitions") or 0) >= 1
        assert not [ls for (n, ls) in s if n == "kafka_partitions_with_late_transactions"
                    and ("broker", str(leader)) in ls]
        assert scraper.get("/healthz")[0] == 200
        sim.start_broker(leader)
        wait_healthy(scraper)
        assert scraper.value("kafka_txn_exporter_unobserved_partitions") == 0


def test_broker_slower_than_the_request_timeout(sim: SimCluster) -> None:
    leader = leader_of(sim, "t", 1)
    with in_process_exporter(cluster_settings(sim, request_timeout_seconds=0.5)) as scraper:
        wait_healthy(scraper)
        sim.set_latency(1500, broker_id=leader)
        scraper.wait_for(lambda: errors(scraper, broker=str(leader), error="REQUEST_TIMEOUT")
                         >= 1 and scraper.value("kafka_txn_exporter_broker_up",
                                                broker=str(leader)) == 0, "a timeout")
        assert hanging(scraper) is None  # its partitions are unobserved, not empty
        began = time.monotonic()
        scraper.samples()
        assert time.monotonic() - began < 0.5  # a scrape never waits for the slow poll
        sim.set_latency(0, broker_id=leader)
        wait_healthy(scraper)


def test_poll_longer_than_the_interval_never_overlaps_nor_piles_up(sim: SimCluster) -> None:
    """Every Metadata answer takes 1 s, the interval is 0.2 s: polls run back to back (one at
    a time), missed runs coalesce, and the rate returns to normal when the broker does."""
    lock = threading.Lock()
    running: list[int] = [0]
    peak: list[int] = [0]

    def job_factory(settings: ClusterSettings) -> ClusterJob:
        job = make_cluster_job(settings)

        async def poll() -> Any:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                return await job.poll()
            finally:
                with lock:
                    running[0] -= 1

        return ClusterJob(settings, poll, job.analyze, job.close)

    settings = cluster_settings(sim, poll_interval_seconds=0.2, request_timeout_seconds=5.0,
                                metadata_max_age_seconds=0.0)  # every poll meets the slow answer
    with in_process_exporter(settings, job_factory=job_factory) as scraper:
        wait_healthy(scraper)
        sim.set_latency(1000, api_key=METADATA)

        def polls() -> float:
            return scraper.value("kafka_txn_exporter_poll_duration_seconds_count") or 0.0

        time.sleep(1.2)  # let a slow poll start
        before = polls()
        began = time.monotonic()
        scraper.samples()
        assert time.monotonic() - began < 0.5  # scrapes are served from the last snapshot
        time.sleep(3.0)
        slow = polls() - before
        assert 1 <= slow <= 4  # ~3 s / 1 s per poll; at 0.2 s intervals it would be ~15
        sim.set_latency(0, api_key=METADATA)
        time.sleep(0.3)
        before = polls()
        time.sleep(1.0)
        fast = polls() - before
        assert 2 <= fast <= 7  # back to ~every 0.2 s, and no burst of the missed runs
        wait_healthy(scraper)
    assert peak[0] == 1


@pytest.mark.parametrize(("api_key", "code", "api", "error", "expect"), [
    (DESCRIBE_PRODUCERS, NOT_LEADER_OR_FOLLOWER, "DescribeProducers", "NOT_LEADER_OR_FOLLOWER",
     "unobserved"),
    (DESCRIBE_TRANSACTIONS, NOT_COORDINATOR, "DescribeTransactions", "NOT_COORDINATOR",
     "unknown"),
    (LIST_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, "ListTransactions",
     "COORDINATOR_LOAD_IN_PROGRESS", "unknown"),
])
def test_retriable_kafka_errors_that_do_not_go_away(
    sim: SimCluster, api_key: int, code: int, api: str, error: str, expect: str
) -> None:
    """The poller retries each once within a poll; while the error persists the transaction is
    unobserved (leader unknown) or `unknown` (coordinator unknown) - never "gone" and never
    called hanging on a guess - and the error is counted."""
    with in_process_exporter(cluster_settings(sim)) as scraper:
        wait_healthy(scraper)
        sim.inject_error(api_key, code)
        scraper.wait_for(lambda: errors(scraper, api=api, error=error) >= 2, f"{error} counted")
        if expect == "unobserved":
            scraper.wait_for(lambda: hanging(scraper) is None, "the partition unobserved")
            assert (scraper.value("kafka_txn_exporter_unobserved_partitions") or 0) >= 1
        else:
            scraper.wait_for(lambda: classification(scraper) == {"unknown"},
                             "classification unknown")
            if api == "ListTransactions":
                assert scraper.value("kafka_transactions") is None  # partial counts mislead
        assert scraper.value("kafka_txn_exporter_up") == 1
        sim.clear_errors()
        wait_healthy(scraper)
        assert classification(scraper) == {"hanging"}


def set_sasl_password(sim: SimCluster, user: str, password: str) -> None:
    """The broker-side credential changes (PLAIN): a rotation, or an operator fixing one.
    Test-only reach into the simulator's listener security (it has no public setter)."""
    listener = next(iter(sim._listeners.values()))
    users = listener._security.sasl
    sim.call(users._passwords.__setitem__, user, password)


def test_authentication_failure_then_recovery() -> None:
    with SimCluster(brokers=2, topics={"t": 2}, sasl_users={"exporter": "old-password"},
                    broker_config=BROKER_CONFIG) as sim:
        from exporter.settings import SaslSettings

        settings = cluster_settings(
            sim, sasl=SaslSettings("PLAIN", "exporter", "new-password"))
        with in_process_exporter(settings) as scraper:
            scraper.wait_for(lambda: errors(scraper, error="AUTHENTICATION_FAILED") >= 2,
                             "failed authentications counted")
            assert scraper.value("kafka_txn_exporter_up") == 0
            assert scraper.get("/readyz")[0] == 503
            assert scraper.get("/healthz")[0] == 200
            assert scraper.value("kafka_transactions") is None  # no data, not zero
            set_sasl_password(sim, "exporter", "new-password")
            scraper.wait_for(lambda: scraper.value("kafka_txn_exporter_up") == 1, "up again")
            assert scraper.get("/readyz")[0] == 200


FAULT_ERRORS = {"malformed": "DECODE_ERROR", "truncate": "BROKER_UNREACHABLE",
                "reset": "BROKER_UNREACHABLE"}


@pytest.mark.parametrize("kind", ["truncate", "malformed", "reset"])
@pytest.mark.parametrize(("api_key", "api"), [(METADATA, "Metadata"),
                                              (DESCRIBE_PRODUCERS, "DescribeProducers"),
                                              (LIST_TRANSACTIONS, "ListTransactions")])
def test_broken_responses(sim: SimCluster, kind: str, api_key: int, api: str) -> None:
    """Truncated (FIN mid-frame), malformed (undecodable) and reset (RST mid-frame) answers
    from every broker, until the fault is cleared."""
    # Metadata every poll, so that every poll meets the broken Metadata answers (by default a
    # poll that saw nothing change reuses the previous answer).
    every_poll = {"metadata_max_age_seconds": 0.0} if api == "Metadata" else {}
    with in_process_exporter(cluster_settings(sim, **every_poll)) as scraper:
        wait_healthy(scraper)
        sim.fail_next_responses(kind, api_key=api_key, count=None)  # type: ignore[arg-type]
        scraper.wait_for(lambda: errors(scraper, api=api, error=FAULT_ERRORS[kind]) >= 2,
                         f"{api} {FAULT_ERRORS[kind]} counted")
        if api == "Metadata":
            assert scraper.value("kafka_txn_exporter_up") == 0  # nothing known this poll
        if api != "ListTransactions":
            assert hanging(scraper) is None
        else:
            assert classification(scraper) <= {"unknown"}
        assert scraper.get("/healthz")[0] == 200
        sim.clear_faults()
        wait_healthy(scraper)


class FakeResolver:
    """getaddrinfo that fails for *.invalid until told otherwise - DNS failures without DNS
    traffic (tests talk only to loopback)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.resolvable = False
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(host, str) and host.endswith(".invalid"):
                if not self.resolvable:
                    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
                host = "127.0.0.1"
            return real(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_bootstrap_host_that_does_not_resolve(sim: SimCluster,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = FakeResolver(monkeypatch)
    port = sim.endpoints[1][1]
    settings = cluster_settings(sim, bootstrap_servers=(f"kafka.invalid:{port}",))
    with in_process_exporter(settings) as scraper:
        scraper.wait_for(lambda: errors(scraper, api="Metadata", error="BROKER_UNREACHABLE")
                         >= 3, "several failed polls")
        assert scraper.value("kafka_txn_exporter_up") == 0
        assert scraper.get("/readyz")[0] == 503
        assert scraper.get("/healthz")[0] == 200
        resolver.resolvable = True  # the DNS record appears
        wait_healthy(scraper)
        assert scraper.get("/readyz")[0] == 200
    # A second, resolvable bootstrap server is enough from the start.
    resolver.resolvable = False
    settings = cluster_settings(
        sim, bootstrap_servers=("kafka.invalid:9092", *sim.bootstrap_servers.split(",")))
    with in_process_exporter(settings) as scraper:
        wait_healthy(scraper)


def test_every_broker_down_at_start_up(sim: SimCluster) -> None:
    for broker in sim.node_ids:
        sim.stop_broker(broker)
    with in_process_exporter(cluster_settings(sim)) as scraper:
        assert scraper.get("/healthz")[0] == 200
        scraper.wait_for(lambda: errors(scraper, api="Metadata") >= 2, "failed polls")
        status, body = scraper.get("/readyz")
        assert status == 503 and "sim" in body
        assert scraper.value("kafka_txn_exporter_up") == 0
        assert scraper.value("kafka_partitions_with_late_transactions") is None
        for broker in sim.node_ids:
            sim.start_broker(broker)
        scraper.wait_for(lambda: scraper.get("/readyz")[0] == 200, "ready")
        wait_healthy(scraper)


def polls(scraper: Scraper) -> float:
    return scraper.value("kafka_txn_exporter_poll_duration_seconds_count") or 0.0


def test_a_partition_whose_answer_was_too_large_is_observed_again_when_the_broker_heals(
    sim: SimCluster,
) -> None:
    """The leader of the hanging transaction's partition answers DescribeProducers with a
    2 GiB size prefix for a few polls: the partition is unobserved (never "no transaction")
    while it does, and observed again within a few polls once its answers are normal: what
    is learnt from a fault does not outlive it."""
    leader = leader_of(sim, "t", 1)
    with in_process_exporter(cluster_settings(sim)) as scraper:
        wait_healthy(scraper)
        sim.fail_next_responses("oversized", broker_id=leader, api_key=DESCRIBE_PRODUCERS,
                                count=None)
        scraper.wait_for(lambda: errors(scraper, broker=str(leader), api="DescribeProducers",
                                        error="DECODE_ERROR") >= 1, "an oversized answer")
        start = polls(scraper)
        scraper.wait_for(lambda: polls(scraper) >= start + 3, "three polls of oversized answers")
        assert hanging(scraper) is None
        assert (scraper.value("kafka_txn_exporter_unobserved_partitions") or 0) >= 1
        sim.clear_faults()
        healed = polls(scraper)
        scraper.wait_for(lambda: hanging(scraper) is not None, "the hanging transaction again",
                         timeout=30.0)
        assert polls(scraper) - healed <= 6  # a few polls, not "never"
        scraper.wait_for(
            lambda: scraper.value("kafka_txn_exporter_unobserved_partitions") == 0,
            "every partition observed")
