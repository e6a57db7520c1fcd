"""SASL on the simulator's listeners, checked on the wire: SaslHandshake v0/v1, SaslAuthenticate
v0-v2, PLAIN and SCRAM-SHA-256/512 (RFC 5802/7677), failures answered like Kafka's
SaslServerAuthenticator (error 58, then the connection is closed)."""

from __future__ import annotations

import base64
import secrets
import socket
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kafka.net.sasl.scram import ScramClient
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka_sim import sasl as sim_sasl
from kafka_sim.api import RequestContext
from kafka_sim.cluster import SimCluster
from kafka_sim.versions import KAFKA_4_0

USERS = {"alice": "alice-secret", "bob": "b,o=b"}


class PrincipalRecorder:
    def __init__(self) -> None:
        self.principals: list[str] = []

    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        return KAFKA_4_0.api_versions

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        self.principals.append(ctx.principal)
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="sasl",
                                controller_id=-1, topics=[])


@pytest.fixture
def recorder() -> PrincipalRecorder:
    return PrincipalRecorder()


@pytest.fixture
def sim(recorder: PrincipalRecorder) -> Iterator[SimCluster]:
    with SimCluster(brokers=1, dispatcher=recorder, sasl_users=USERS) as cluster:
        yield cluster


class Wire:
    """A blocking Kafka connection speaking one request at a time."""

    def __init__(self, sim: SimCluster) -> None:
        host, port = next(iter(sim.endpoints.values()))
        self.sock = socket.create_connection((host, port), timeout=5)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, request: Any, response_class: Any) -> Any:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="sasl-test")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        raw = self._read_frame()
        response = response_class.decode(raw, version=request.API_VERSION, header=True)
        assert response.header.correlation_id == self.correlation_id
        return response

    def _read_frame(self) -> bytes:
        head = self.sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            raise EOFError("closed by broker")
        (size,) = struct.unpack(">i", head)
        return self.sock.recv(size, socket.MSG_WAITALL)

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        return self.request(SaslHandshakeRequest(version=version, mechanism=mechanism),
                            SaslHandshakeResponse)

    def authenticate(self, token: bytes, version: int = 2) -> Any:
        return self.request(SaslAuthenticateRequest(version=version, auth_bytes=token),
                            SaslAuthenticateResponse)

    def metadata(self) -> Any:
        return self.request(MetadataRequest(version=12, topics=[]), MetadataResponse)

    def assert_closed(self) -> None:
        assert self.sock.recv(1) == b""


@pytest.fixture
def wire(sim: SimCluster) -> Iterator[Wire]:
    w = Wire(sim)
    try:
        yield w
    finally:
        w.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_with_the_right_password_authenticates_every_authenticate_version(
    wire: Wire, recorder: PrincipalRecorder, version: int
) -> None:
    handshake = wire.handshake("PLAIN")
    assert handshake.error_code == 0
    assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    response = wire.authenticate(b"\x00alice\x00alice-secret", version=version)
    assert (response.error_code, response.auth_bytes) == (0, b"")
    if version >= 1:
        assert response.session_lifetime_ms == 0  # connections.max.reauth.ms defaults to 0
    wire.metadata()
    assert recorder.principals == ["User:alice"]


def test_plain_with_a_wrong_password_is_error_58_then_closed(
    wire: Wire, recorder: PrincipalRecorder
) -> None:
    wire.handshake("PLAIN")
    response = wire.authenticate(b"\x00alice\x00wrong")
    assert response.error_code == 58
    assert response.error_message == "Authentication failed: Invalid username or password"
    wire.assert_closed()
    assert recorder.principals == []


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "bob"])
def test_scram_with_the_right_password_verifies_the_server_signature(
    wire: Wire, recorder: PrincipalRecorder, mechanism: str, user: str
) -> None:
    client = ScramClient(user.replace("=", "=3D").replace(",", "=2C"), USERS[user], mechanism)
    assert wire.handshake(mechanism).error_code == 0
    first = wire.authenticate(client.first_message())
    assert first.error_code == 0
    client.process_server_first_message(first.auth_bytes)
    final = wire.authenticate(client.final_message())
    assert final.error_code == 0
    client.process_server_final_message(final.auth_bytes)  # raises on a bad server signature
    wire.metadata()
    assert recorder.principals == [f"User:{user}"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_wrong_password_is_error_58_then_closed(
    wire: Wire, recorder: PrincipalRecorder, mechanism: str
) -> None:
    client = ScramClient("alice", "wrong", mechanism)
    wire.handshake(mechanism)
    client.process_server_first_message(wire.authenticate(client.first_message()).auth_bytes)
    final = wire.authenticate(client.final_message())
    assert final.error_code == 58
    assert final.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL"
        f" mechanism {mechanism}"
    )
    wire.assert_closed()
    assert recorder.principals == []


def test_scram_unknown_user_fails_at_the_first_message(wire: Wire) -> None:
    wire.handshake("SCRAM-SHA-256")
    response = wire.authenticate(ScramClient("mallory", "x", "SCRAM-SHA-256").first_message())
    assert response.error_code == 58
    wire.assert_closed()


def test_a_request_other_than_authenticate_after_the_handshake_closes(wire: Wire) -> None:
    wire.handshake("PLAIN")
    with pytest.raises(EOFError):
        wire.metadata()


def test_authenticate_again_after_success_is_illegal_sasl_state(wire: Wire) -> None:
    wire.handshake("PLAIN")
    wire.authenticate(b"\x00alice\x00alice-secret")
    again = wire.authenticate(b"\x00alice\x00alice-secret")
    assert again.error_code == 34
    assert again.error_message == (
        "SaslAuthenticate request received after successful authentication"
    )
    assert wire.handshake("PLAIN").error_code == 34


def test_scram_server_matches_rfc_7677_test_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 7677 section 3: user "user", password "pencil", 4096 iterations."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    monkeypatch.setattr(secrets, "token_bytes", lambda n: salt)
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = sim_sasl.SaslUsers({"user": "pencil"}, ("SCRAM-SHA-256",)).new_server("SCRAM-SHA-256")
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    server_final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete
    assert server.username == "user"
