"""The asyncio broker connection (exporter/collect/connection.py) against the simulator's
network layer over TCP: negotiation, pipelining, per-request timeouts, typed errors, TLS, SASL.

The brokers' logic is replaced by a tiny dispatcher so only the network behaviour is exercised.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kafka.protocol.admin.transactions import DescribeProducersRequest, ListTransactionsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka_sim.api import RequestContext
from kafka_sim.cluster import SimCluster, SimTls
from kafka_sim.versions import PROFILES

from exporter.collect.apis.metadata import build_metadata_request
from exporter.collect.connection import (
    AuthenticationFailed,
    BrokerConnection,
    BrokerUnreachable,
    ConnectionOptions,
    ConnectionPool,
    DecodeError,
    RequestTimeout,
    UnsupportedApi,
    build_ssl_context,
    error_name,
    parse_bootstrap,
)
from exporter.collect.sasl.logins import make_login
from exporter.settings import SaslSettings, TlsSettings

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class MetadataDispatcher:
    """Kafka 4.0's API versions (or another profile's); answers Metadata, naming the broker."""

    def __init__(self, profile: str = "4.0") -> None:
        self.profile = PROFILES[profile]
        self.principals: list[str] = []

    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        return self.profile.api_versions

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        self.principals.append(ctx.principal)
        if ctx.api_key == 3:
            return MetadataResponse(
                throttle_time_ms=0,
                brokers=[
                    MetadataResponse.MetadataResponseBroker(
                        node_id=ctx.broker_id, host="127.0.0.1", port=1, rack=None
                    )
                ],
                cluster_id=f"corr-{ctx.correlation_id}",
                controller_id=ctx.broker_id,
                topics=[],
            )
        raise NotImplementedError(ctx.api_key)


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(brokers=1, dispatcher=MetadataDispatcher()) as cluster:
        yield cluster


def address(sim: SimCluster) -> tuple[str, int]:
    return next(iter(sim.endpoints.values()))


def options(**kwargs: Any) -> ConnectionOptions:
    kwargs.setdefault("connect_timeout_seconds", 5.0)
    if kwargs.get("sasl") is not None:
        kwargs.setdefault("login", make_login(kwargs["sasl"]))
    return ConnectionOptions(client_id="test", **kwargs)


def metadata_request(connection: BrokerConnection) -> Any:
    return build_metadata_request(None, connection.version_for(MetadataRequest))


async def connected(sim: SimCluster, opts: ConnectionOptions | None = None) -> BrokerConnection:
    connection = BrokerConnection(*address(sim), opts or options())
    await connection.connect()
    return connection


def test_negotiates_the_best_version_both_sides_support(sim: SimCluster) -> None:
    async def scenario() -> dict[str, int]:
        connection = await connected(sim)
        try:
            return {
                "metadata": connection.version_for(MetadataRequest),  # both 13
                "fetch": connection.version_for(FetchRequest),  # client 18, broker 17
                "list_txns": connection.version_for(ListTransactionsRequest),  # client 2, broker 1
                "capped": connection.version_for(FetchRequest, max_version=12),
                "describe_producers": connection.version_for(DescribeProducersRequest),
            }
        finally:
            await connection.close()

    assert run(scenario()) == {
        "metadata": 13,
        "fetch": 17,
        "list_txns": 1,
        "capped": 12,
        "describe_producers": 0,
    }


def test_api_the_broker_does_not_offer_is_unsupported() -> None:
    dispatcher = MetadataDispatcher(profile="no-transaction-admin")
    with SimCluster(brokers=1, dispatcher=dispatcher) as sim:

        async def scenario() -> None:
            connection = await connected(sim)
            try:
                connection.version_for(DescribeProducersRequest)
            finally:
                await connection.close()

        with pytest.raises(UnsupportedApi):
            run(scenario())


def test_pipelined_requests_each_get_their_own_answer(sim: SimCluster) -> None:
    async def scenario() -> list[str]:
        connection = await connected(sim)
        try:
            requests = [metadata_request(connection) for _ in range(40)]
            responses = await asyncio.gather(*(connection.request(r, 5.0) for r in requests))
            # The dispatcher echoes each request's correlation id as cluster_id.
            assert [r.header.correlation_id for r in responses] == [
                r.header.correlation_id for r in requests
            ]
            return [r.cluster_id for r in responses]
        finally:
            await connection.close()

    cluster_ids = run(scenario())
    assert len(set(cluster_ids)) == 40


def test_request_timeout_is_per_request_and_the_connection_survives(sim: SimCluster) -> None:
    sim.set_latency(400, api_key=3)

    async def scenario() -> str:
        connection = await connected(sim)
        try:
            with pytest.raises(RequestTimeout):
                await connection.request(metadata_request(connection), 0.05)
            sim.set_latency(0, api_key=3)
            # The late answer to the first request is dropped; this one gets its own.
            request = metadata_request(connection)
            response = await connection.request(request, 5.0)
            assert response.header.correlation_id == request.header.correlation_id
            return str(response.cluster_id)
        finally:
            await connection.close()

    assert run(scenario()).startswith("corr-")


def test_closed_port_is_broker_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def scenario() -> None:
        await BrokerConnection("127.0.0.1", port, options()).connect()

    with pytest.raises(BrokerUnreachable):
        run(scenario())


def test_truncated_response_fails_the_request_as_unreachable(sim: SimCluster) -> None:
    async def scenario() -> None:
        connection = await connected(sim)
        sim.fail_next_responses("truncate", api_key=3)
        try:
            await connection.request(metadata_request(connection), 5.0)
        finally:
            await connection.close()

    with pytest.raises(BrokerUnreachable):
        run(scenario())


def test_malformed_response_is_a_decode_error_not_a_crash(sim: SimCluster) -> None:
    async def scenario() -> str:
        connection = await connected(sim)
        sim.fail_next_responses("malformed", api_key=3)
        try:
            with pytest.raises(DecodeError):
                await connection.request(metadata_request(connection), 5.0)
            response = await connection.request(metadata_request(connection), 5.0)
            return str(response.cluster_id)
        finally:
            await connection.close()

    assert run(scenario()).startswith("corr-")


def test_pool_reconnects_after_the_broker_comes_back(sim: SimCluster) -> None:
    host, port = address(sim)

    async def scenario() -> None:
        pool = ConnectionPool(options())
        try:
            first = await pool.get(host, port)
            assert (await pool.get(host, port)) is first
            sim.stop_broker(sim.node_ids[0])
            with pytest.raises(BrokerUnreachable):
                await first.request(metadata_request(first), 2.0)
            with pytest.raises(BrokerUnreachable):
                await pool.get(host, port)
            sim.start_broker(sim.node_ids[0])
            second = await pool.get(host, port)
            assert second is not first
            await second.request(metadata_request(second), 2.0)
        finally:
            await pool.close()

    run(scenario())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_mechanisms_authenticate_the_principal(mechanism: str) -> None:
    dispatcher = MetadataDispatcher()
    cluster = SimCluster(brokers=1, dispatcher=dispatcher, sasl_users={"alice": "alice-secret"})
    with cluster as sim:

        async def scenario() -> None:
            sasl = SaslSettings(mechanism=mechanism, username="alice", password="alice-secret")
            connection = await connected(sim, options(sasl=sasl))
            try:
                await connection.request(metadata_request(connection), 5.0)
            finally:
                await connection.close()

        run(scenario())
    assert dispatcher.principals == ["User:alice"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_wrong_password_is_authentication_failed_without_the_secret(mechanism: str) -> None:
    cluster = SimCluster(
        brokers=1, dispatcher=MetadataDispatcher(), sasl_users={"alice": "alice-secret"}
    )
    with cluster as sim:

        async def scenario() -> None:
            sasl = SaslSettings(mechanism=mechanism, username="alice", password="wrong-secret")
            await connected(sim, options(sasl=sasl))

        with pytest.raises(AuthenticationFailed) as info:
            run(scenario())
    assert "wrong-secret" not in str(info.value)


def _self_signed(tmp_path: Path, name: str) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = tmp_path / f"{name}.crt"
    key_file = tmp_path / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file)


def test_tls_verifies_the_broker_against_the_configured_ca(tmp_path: Path) -> None:
    cert_file, key_file = _self_signed(tmp_path, "broker")
    other_ca, _ = _self_signed(tmp_path, "other")
    tls = SimTls(cert_file=cert_file, key_file=key_file)
    with SimCluster(brokers=1, dispatcher=MetadataDispatcher(), tls=tls) as sim:

        async def good() -> None:
            context = build_ssl_context(TlsSettings(ca_file=cert_file))
            connection = await connected(sim, options(ssl_context=context))
            try:
                await connection.request(metadata_request(connection), 5.0)
            finally:
                await connection.close()

        async def untrusted() -> None:
            context = build_ssl_context(TlsSettings(ca_file=other_ca))
            await connected(sim, options(ssl_context=context))

        run(good())
        with pytest.raises(AuthenticationFailed):
            run(untrusted())


def test_error_names_are_kafkas_current_names() -> None:
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(29) == "TOPIC_AUTHORIZATION_FAILED"
    assert error_name(105) == "TRANSACTIONAL_ID_NOT_FOUND"
    assert error_name(9999) == "UNKNOWN_ERROR_CODE_9999"


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("h:1") == ("h", 1)
    assert parse_bootstrap("[::1]:9093") == ("::1", 9093)
    assert parse_bootstrap("kafka") == ("kafka", 9092)


def test_a_connection_whose_sasl_session_ends_is_replaced_and_closed_once_idle() -> None:
    """The broker ends a SASL session after `session_lifetime_ms` (KIP-368; the real broker
    does, tests/realkafka/test_real_oauthbearer.py): past the connection's re-authentication
    time the pool hands out a new, authenticated connection, and the old one answers what it
    was asked before it closes."""
    dispatcher = SlowMetadataDispatcher()
    cluster = SimCluster(brokers=1, dispatcher=dispatcher, sasl_users={"alice": "alice-secret"})
    with cluster as sim:

        async def scenario() -> None:
            sasl = SaslSettings(mechanism="PLAIN", username="alice", password="alice-secret")
            pool = ConnectionPool(options(sasl=sasl))
            try:
                old = await pool.get(*address(sim))
                assert old.reauthenticate_at is None  # the simulator ends no session
                dispatcher.delay_seconds = 0.5  # the next answer comes late
                in_flight = asyncio.ensure_future(old.request(metadata_request(old), 5.0))
                await asyncio.sleep(0)  # the request is written
                assert not old.is_idle
                old.reauthenticate_at = 0.0  # as if its session's lifetime had passed
                new = await pool.get(*address(sim))
                assert new is not old and new.is_open
                answer = await in_flight  # not failed by the replacement
                assert answer.cluster_id.startswith("corr-")
                await asyncio.wait_for(_closed(old), 5.0)
                await new.request(metadata_request(new), 5.0)
            finally:
                await pool.close()

        run(scenario())


class SlowMetadataDispatcher(MetadataDispatcher):
    """Answers the next Metadata `delay_seconds` late (once)."""

    delay_seconds = 0.0

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        delay = 0.0
        if ctx.api_key == 3:
            delay, self.delay_seconds = self.delay_seconds, 0.0
        if delay:
            import time

            time.sleep(delay)
        return super().handle(ctx, request)


async def _closed(connection: BrokerConnection) -> None:
    while connection._writer is not None and not connection._writer.is_closing():
        await asyncio.sleep(0.02)
