"""SASL session lifetime (KIP-368) on a real broker: with connections.max.reauth.ms set, the
broker announces the session's lifetime in SaslAuthenticate and closes the connection on the
first request after it ends; the exporter renews its connection before then, so its polls
never meet an ended session (the pool replaces a connection once 85-95% of its
session has passed). AWS MSK ends IAM sessions the same way (when the
token or credentials expire); the simulator does as this broker does
(tests/security/test_msk_iam_sim.py). Facts: docs/kafka-semantics.md#sasl-session-lifetime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import MetadataRequest
from securekafka import README_GRANTS, SecureKafka, allow, start_secure_kafka, wait_acls

from exporter.collect.apis.metadata import build_metadata_request
from exporter.collect.connection import (
    REAUTHENTICATE_FACTOR,
    REAUTHENTICATE_JITTER,
    BrokerConnection,
    CollectError,
    ConnectionOptions,
    ConnectionPool,
    build_ssl_context,
)
from exporter.collect.sasl.logins import make_login
from exporter.observe import ClusterObserver

pytestmark = pytest.mark.real_kafka

REAUTH_MS = 10_000


@pytest.fixture(scope="module")
def kafka(
    focused_kafka_version: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureKafka]:
    secure = start_secure_kafka(focused_kafka_version, tmp_path_factory.mktemp("reauth"),
                                {"connections.max.reauth.ms": str(REAUTH_MS)})
    try:
        allow(secure.cluster, "exporter", README_GRANTS)
        wait_acls(secure.cluster, "exporter", len(README_GRANTS))
        yield secure
    finally:
        secure.cluster.stop()


def options(kafka: SecureKafka) -> ConnectionOptions:
    settings = kafka.settings("exporter")
    assert settings.tls is not None and settings.sasl is not None
    return ConnectionOptions(client_id="reauth-test", ssl_context=build_ssl_context(settings.tls),
                             sasl=settings.sasl, login=make_login(settings.sasl),
                             connect_timeout_seconds=10.0)


def test_the_broker_announces_the_session_and_closes_it_on_the_first_request_after(
    kafka: SecureKafka,
) -> None:
    host, _, port = kafka.sasl_ssl_bootstrap.split(",")[0].rpartition(":")

    async def scenario() -> tuple[float, float]:
        connection = BrokerConnection(host, int(port), options(kafka))
        started = time.monotonic()
        await connection.connect()
        announced = connection.session_lifetime_ms / 1000
        assert connection.reauthenticate_at is not None
        assert connection.reauthenticate_at - started <= (
            (REAUTHENTICATE_FACTOR + REAUTHENTICATE_JITTER) * announced
            + (time.monotonic() - started))
        # Requests succeed until the session ends; the first one after it finds the
        # connection closed by the broker (polled until then, bounded by 6 lifetimes).
        deadline = started + 6 * REAUTH_MS / 1000
        try:
            while time.monotonic() < deadline:
                request = build_metadata_request([], connection.version_for(MetadataRequest))
                try:
                    await connection.request(request, 10.0)
                except CollectError:
                    return announced, time.monotonic() - started
                await asyncio.sleep(0.5)
        finally:
            await connection.close()
        raise AssertionError("the broker never closed the connection of an ended session")

    announced, closed_after = asyncio.run(scenario())
    assert announced == REAUTH_MS / 1000  # SCRAM credentials do not expire: the whole setting
    assert closed_after >= announced


def test_the_pool_renews_a_due_connection_and_polls_meet_no_ended_session(
    kafka: SecureKafka,
) -> None:
    """Polls (paced half a second apart) until the connection was replaced twice: every poll
    sees the broker up and no request error."""
    settings = kafka.settings("exporter", request_timeout_seconds=10.0)
    poller = ClusterObserver(settings)
    renewals = 0
    polls = 0
    started = time.monotonic()
    try:
        while renewals < 2:
            assert time.monotonic() - started < 10 * REAUTH_MS / 1000, "no renewal"
            pool: ConnectionPool = poller.poller._client.pool
            before = {key: id(c) for key, c in pool._connections.items()}
            obs = poller.poll()
            polls += 1
            assert [b.up for b in obs.brokers] == [True], obs.brokers
            assert obs.request_errors == (), obs.request_errors
            after = {key: id(c) for key, c in pool._connections.items()}
            renewals += sum(1 for key in before if key in after and after[key] != before[key])
            time.sleep(0.5)
    finally:
        poller.close()
    assert polls >= 3
