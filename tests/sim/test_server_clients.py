"""The simulator's network layer seen by real clients: kafka-python over TCP, TLS and SASL,
and each injected network fault as a client meets it on a real cluster.

The brokers' logic is a minimal Metadata/DescribeCluster dispatcher, so these tests exercise only
sockets, TLS, SASL and faults.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kafka import KafkaAdminClient
from kafka import errors as kafka_errors
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest, MetadataResponse
from kafka.protocol.parser import KafkaProtocol
from kafka_sim.api import RequestContext
from kafka_sim.cluster import SimCluster, SimTls
from kafka_sim.versions import KAFKA_4_0

METADATA = 3


class ClusterViewDispatcher:
    """Answers Metadata and DescribeCluster with the simulator's real endpoints."""

    def __init__(self) -> None:
        self.endpoints: Callable[[], Mapping[int, tuple[str, int]]] = dict
        self.principals: list[str] = []

    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        return KAFKA_4_0.api_versions

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        self.principals.append(ctx.principal)
        endpoints = self.endpoints()
        controller = min(endpoints)
        if ctx.api_key == METADATA:
            return MetadataResponse(
                throttle_time_ms=0,
                brokers=[
                    MetadataResponse.MetadataResponseBroker(
                        node_id=node, host=host, port=port, rack=None
                    )
                    for node, (host, port) in endpoints.items()
                ],
                cluster_id="sim-cluster",
                controller_id=controller,
                topics=[],
            )
        if ctx.api_key == 60:
            return DescribeClusterResponse(
                throttle_time_ms=0,
                error_code=0,
                error_message=None,
                endpoint_type=1,
                cluster_id="sim-cluster",
                controller_id=controller,
                brokers=[
                    DescribeClusterResponse.DescribeClusterBroker(
                        broker_id=node, host=host, port=port, rack=None, is_fenced=False
                    )
                    for node, (host, port) in endpoints.items()
                ],
            )
        raise NotImplementedError(ctx.api_key)


def start_sim(**kwargs: Any) -> tuple[SimCluster, ClusterViewDispatcher]:
    dispatcher = ClusterViewDispatcher()
    sim = SimCluster(dispatcher=dispatcher, **kwargs).start()
    dispatcher.endpoints = lambda: sim.endpoints
    return sim, dispatcher


@pytest.fixture
def sim3() -> Iterator[SimCluster]:
    sim, _ = start_sim(brokers=3)
    try:
        yield sim
    finally:
        sim.close()


def admin(sim: SimCluster, **config: Any) -> Any:
    config.setdefault("request_timeout_ms", 3000)
    return KafkaAdminClient(
        bootstrap_servers=sim.bootstrap_servers,
        **config,
    )


def raw_metadata(host: str, port: int, timeout_s: float = 3) -> bytes:
    """One Metadata v12 exchange on a fresh socket; returns the response frame."""
    request = MetadataRequest(version=12, topics=[])
    request.with_header(correlation_id=1, client_id="fault-test")
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            raise EOFError("closed before a response")
        (size,) = struct.unpack(">i", head)
        body = sock.recv(size, socket.MSG_WAITALL)
        if len(body) < size:
            raise EOFError(f"closed after {len(body)} of {size} bytes")
        return body


# --- plain clients ---------------------------------------------------------------------------


def test_kafka_python_admin_client_describes_the_simulated_cluster(sim3: SimCluster) -> None:
    client = admin(sim3)
    try:
        cluster = client.describe_cluster()
    finally:
        client.close()
    assert cluster["cluster_id"] == "sim-cluster"
    assert {(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]} == {
        (node, host, port) for node, (host, port) in sim3.endpoints.items()
    }
    assert sim3.bootstrap_servers == ",".join(f"{h}:{p}" for h, p in sim3.endpoints.values())


def test_admin_client_sees_the_real_cluster_state_through_the_network_layer() -> None:
    """Metadata answered by ClusterState, reached through bootstrap over every listener."""
    with SimCluster(brokers=3, topics={"orders": 6, "payments": 3}) as sim:
        client = admin(sim)
        try:
            topics = set(client.list_topics())
            (orders,) = client.describe_topics(["orders"])
        finally:
            client.close()
        assert {"orders", "payments"} <= topics
        assert sorted(p["partition_index"] for p in orders["partitions"]) == list(range(6))
        assert {p["leader_id"] for p in orders["partitions"]} == {1, 2, 3}
        assert sim.clock.now_ms() > 0


def test_close_joins_the_loop_thread_and_frees_the_ports() -> None:
    import threading

    before = set(threading.enumerate())
    sim, _ = start_sim(brokers=2)
    started = set(threading.enumerate()) - before
    assert [t.name for t in started] == ["kafka-sim-loop"]
    endpoints = sim.endpoints
    sim.close()
    assert not any(t.is_alive() for t in started)
    for host, port in endpoints.values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, port), timeout=1)


def test_fixed_ports_are_used() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sim, _ = start_sim(brokers=1, node_ids=[7], ports=[port])
    try:
        assert sim.endpoints == {7: ("127.0.0.1", port)}
    finally:
        sim.close()


# --- TLS ---------------------------------------------------------------------------------------


def _write_pem(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _issue(
    subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool, server: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a broker certificate for 127.0.0.1 and a client certificate, as PEM files."""
    out = tmp_path_factory.mktemp("pki")
    files: dict[str, str] = {}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sim-test-ca")])
    ca = _issue(ca_name, ca_key, ca_name, ca_key, ca=True, server=False)
    files["ca"] = _write_pem(out / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    for role, name in (
        ("server", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])),
        ("client", x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "exporter-tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, "txn-exporter"),
        ])),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(name, key, ca_name, ca_key, ca=False, server=role == "server")
        files[f"{role}_cert"] = _write_pem(
            out / f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM)
        )
        files[f"{role}_key"] = _write_pem(
            out / f"{role}-key.pem",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
    return files


def test_tls_listener_serves_kafka_python_over_ssl(pki: dict[str, str]) -> None:
    sim, _ = start_sim(brokers=2, tls=SimTls(pki["server_cert"], pki["server_key"]))
    try:
        assert sim.security_protocol == "SSL"
        client = admin(sim, security_protocol="SSL", ssl_cafile=pki["ca"])
        try:
            assert len(client.describe_cluster()["brokers"]) == 2
        finally:
            client.close()
        # A plaintext client gets no Kafka answer from a TLS listener.
        host, port = next(iter(sim.endpoints.values()))
        with pytest.raises((EOFError, ConnectionError, socket.timeout)):
            raw_metadata(host, port, timeout_s=2)
    finally:
        sim.close()


def test_tls_client_certificate_becomes_the_ssl_principal(pki: dict[str, str]) -> None:
    tls = SimTls(pki["server_cert"], pki["server_key"], ca_file=pki["ca"], client_auth="required")
    sim, dispatcher = start_sim(brokers=1, tls=tls)
    try:
        client = admin(
            sim,
            security_protocol="SSL",
            ssl_cafile=pki["ca"],
            ssl_certfile=pki["client_cert"],
            ssl_keyfile=pki["client_key"],
        )
        try:
            client.describe_cluster()
        finally:
            client.close()
        # Kafka's default SSL principal: the subject DN in RFC 2253 order.
        assert set(dispatcher.principals) == {"User:CN=txn-exporter,O=exporter-tests"}

        # Without a client certificate the TLS handshake itself is refused.
        host, port = next(iter(sim.endpoints.values()))
        context = ssl.create_default_context(cafile=pki["ca"])
        with (
            socket.create_connection((host, port), timeout=3) as sock,
            pytest.raises((ssl.SSLError, ConnectionError)),
            context.wrap_socket(sock, server_hostname="127.0.0.1") as tls_sock,
        ):
            tls_sock.sendall(b"\x00\x00\x00\x00")
            if tls_sock.recv(1) == b"":  # TLS 1.3 reports the alert on first read
                raise ConnectionResetError("closed by broker")
    finally:
        sim.close()


# --- SASL --------------------------------------------------------------------------------------

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_login_with_the_right_password_sets_the_principal(mechanism: str) -> None:
    sim, dispatcher = start_sim(brokers=1, sasl_users=USERS)
    try:
        client = admin(
            sim,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password="alice-secret",
        )
        try:
            assert client.describe_cluster()["cluster_id"] == "sim-cluster"
        finally:
            client.close()
        assert set(dispatcher.principals) == {"User:alice"}
    finally:
        sim.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_login_with_a_wrong_password_never_reaches_the_brokers(mechanism: str) -> None:
    """The broker answers 58 then closes (wire-level checks in test_server_sasl.py).

    kafka-python 3.0.12 drops bytes that arrive together with the FIN (net/transport.py
    _sock_recv), so it reports either error 58 or "socket disconnected"; both are failures.
    """
    sim, dispatcher = start_sim(brokers=1, sasl_users=USERS)
    try:
        with pytest.raises(kafka_errors.KafkaError):
            admin(
                sim,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism,
                sasl_plain_username="alice",
                sasl_plain_password="not-alices",
                bootstrap_timeout_ms=1000,
            )
        assert dispatcher.principals == []
    finally:
        sim.close()


def test_sasl_over_tls(pki: dict[str, str]) -> None:
    sim, dispatcher = start_sim(
        brokers=1, tls=SimTls(pki["server_cert"], pki["server_key"]), sasl_users=USERS
    )
    try:
        assert sim.security_protocol == "SASL_SSL"
        client = admin(
            sim,
            security_protocol="SASL_SSL",
            ssl_cafile=pki["ca"],
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="bob",
            sasl_plain_password="bob-secret",
        )
        try:
            client.describe_cluster()
        finally:
            client.close()
        assert set(dispatcher.principals) == {"User:bob"}
    finally:
        sim.close()


# --- network faults ---------------------------------------------------------------------------


def test_stopped_broker_refuses_connections_and_drops_open_ones(sim3: SimCluster) -> None:
    host, port = sim3.endpoints[2]
    with socket.create_connection((host, port), timeout=3) as open_conn:
        request = ApiVersionsRequest(version=0)
        request.with_header(correlation_id=1, client_id="t")
        open_conn.sendall(bytes(request.encode(header=True, framed=True)))
        assert len(open_conn.recv(4, socket.MSG_WAITALL)) == 4
        open_conn.recv(65536)
        deadline = time.monotonic() + 3
        while sim3.connection_count(2) != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sim3.connection_count(2) == 1

        sim3.stop_broker(2)

        assert sim3.connection_count(2) == 0
        assert not sim3.broker_running(2)
        assert open_conn.recv(1) == b""  # dropped by the broker
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=1)
    raw_metadata(*sim3.endpoints[1])  # the other brokers keep serving

    sim3.start_broker(2)
    assert sim3.endpoints[2] == (host, port)
    assert MetadataResponse.decode(raw_metadata(host, port), version=12, header=True)


def test_latency_makes_a_real_client_time_out(sim3: SimCluster) -> None:
    client = admin(sim3, request_timeout_ms=500)
    try:
        sim3.set_latency(1500, api_key=60)  # DescribeCluster only
        started = time.monotonic()
        with pytest.raises(kafka_errors.RequestTimedOutError):
            client.describe_cluster()
        assert time.monotonic() - started < 1.4
        sim3.clear_faults()
        assert client.describe_cluster()["cluster_id"] == "sim-cluster"
    finally:
        client.close()


def test_latency_delays_responses_by_broker(sim3: SimCluster) -> None:
    sim3.set_latency(300, broker_id=1)
    started = time.monotonic()
    raw_metadata(*sim3.endpoints[1])
    slow = time.monotonic() - started
    started = time.monotonic()
    raw_metadata(*sim3.endpoints[2])
    fast = time.monotonic() - started
    assert slow >= 0.3
    assert fast < 0.3


def test_truncated_response_is_seen_as_a_closed_connection_mid_frame(sim3: SimCluster) -> None:
    sim3.fail_next_responses("truncate", broker_id=1, api_key=METADATA)
    with pytest.raises(EOFError, match="closed after"):
        raw_metadata(*sim3.endpoints[1])
    assert raw_metadata(*sim3.endpoints[1])  # count=1: the next response is whole


def test_malformed_response_fails_to_decode_in_kafka_python(sim3: SimCluster) -> None:
    sim3.fail_next_responses("malformed", api_key=METADATA, count=None)
    frame = raw_metadata(*sim3.endpoints[3])
    assert struct.unpack(">i", frame[:4]) == (1,)  # the correlation id is intact
    # kafka-python's own connection parser, fed the bytes as they came off the socket.
    protocol = KafkaProtocol(client_id="fault-test")
    protocol.send_request(MetadataRequest(version=12, topics=[]), correlation_id=1)
    with pytest.raises(kafka_errors.KafkaProtocolError, match="Unable to decode response"):
        protocol.receive_bytes(struct.pack(">i", len(frame)) + frame)
    sim3.clear_faults()
    assert MetadataResponse.decode(raw_metadata(*sim3.endpoints[3]), version=12, header=True)


def _read_until_failure(host: str, port: int) -> tuple[int, OSError | None]:
    """Send Metadata and read until EOF or error: (bytes received, error or None on EOF)."""
    request = MetadataRequest(version=12, topics=[])
    request.with_header(correlation_id=1, client_id="fault-test")
    received = b""
    with socket.create_connection((host, port), timeout=3) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except OSError as exc:
            return len(received), exc
    return len(received), None


def test_reset_mid_response_is_a_connection_reset(sim3: SimCluster) -> None:
    whole = 4 + len(raw_metadata(*sim3.endpoints[2]))
    sim3.fail_next_responses("reset", broker_id=2, api_key=METADATA, count=2)
    for _ in range(2):
        received, error = _read_until_failure(*sim3.endpoints[2])
        assert isinstance(error, ConnectionResetError)  # RST, not an orderly FIN
        assert received <= whole // 2
    assert raw_metadata(*sim3.endpoints[2])  # the rule was used up


def test_truncate_is_an_orderly_close_after_part_of_the_frame(sim3: SimCluster) -> None:
    whole = 4 + len(raw_metadata(*sim3.endpoints[1]))
    sim3.fail_next_responses("truncate", broker_id=1)
    received, error = _read_until_failure(*sim3.endpoints[1])
    assert error is None
    assert received == whole // 2


def test_stop_and_start_broker_tell_the_cluster_state() -> None:
    with SimCluster(brokers=3, topics={"orders": 3}) as sim:
        sim.stop_broker(2)
        assert sim.call(sim.state.alive_brokers) == [1, 3]
        client = admin(sim)
        try:
            (orders,) = client.describe_topics(["orders"])
        finally:
            client.close()
        assert 2 not in {p["leader_id"] for p in orders["partitions"]}
        sim.start_broker(2)
        assert sim.call(sim.state.alive_brokers) == [1, 2, 3]
