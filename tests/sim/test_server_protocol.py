"""The simulator's network layer over raw TCP sockets: framing, headers, ApiVersions, closes.

Expected bytes come from a real Apache Kafka 4.0.0 broker (tests/data/real-kafka-4.0). The
brokers' logic is replaced by a tiny recording dispatcher so only the network layer is tested.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse
from kafka_sim.api import RequestContext
from kafka_sim.cluster import SimCluster
from kafka_sim.versions import KAFKA_4_0
from simhelpers import capture


class RecordingDispatcher:
    """Advertises Kafka 4.0's APIs; answers Metadata only, so every other API is unimplemented."""

    def __init__(self) -> None:
        self.contexts: list[RequestContext] = []

    def supported_versions(self, broker_id: int) -> Mapping[int, tuple[int, int]]:
        return KAFKA_4_0.api_versions

    def handle(self, ctx: RequestContext, request: Any) -> Any | None:
        self.contexts.append(ctx)
        if ctx.api_key == 3:
            return MetadataResponse(
                throttle_time_ms=0,
                brokers=[MetadataResponse.MetadataResponseBroker(
                    node_id=ctx.broker_id, host="127.0.0.1", port=1, rack=None)],
                cluster_id="sim",
                controller_id=ctx.broker_id,
                topics=[],
            )
        raise NotImplementedError(ctx.api_key)


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def sim(dispatcher: RecordingDispatcher) -> Iterator[SimCluster]:
    with SimCluster(brokers=1, dispatcher=dispatcher) as cluster:
        yield cluster


@pytest.fixture
def real_sim() -> Iterator[SimCluster]:
    """The real brokers' logic (ClusterState) with the "4.0" version profile."""
    with SimCluster(brokers=1, profile="4.0") as cluster:
        yield cluster


@pytest.fixture
def sasl_sim(dispatcher: RecordingDispatcher) -> Iterator[SimCluster]:
    cluster = SimCluster(brokers=1, dispatcher=dispatcher, sasl_users={"alice": "alice-secret"})
    with cluster:
        yield cluster


def connect(sim: SimCluster) -> socket.socket:
    host, port = next(iter(sim.endpoints.values()))
    sock = socket.create_connection((host, port), timeout=5)
    return sock


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"connection closed by broker after {len(data)} of {n} bytes")
        data += chunk
    return data


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", read_exact(sock, 4))
    return read_exact(sock, size)


def assert_closed_without_response(sock: socket.socket) -> None:
    assert sock.recv(4) == b""


def encode(request: Any, correlation_id: int, client_id: str = "raw-test") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True))


@pytest.mark.parametrize("name", ["01", "02", "03"])
def test_api_versions_answer_is_byte_identical_to_kafka_4_0(
    real_sim: SimCluster, name: str
) -> None:
    """ApiVersions v3, v0 and v4 (captures 01, 02, 03): header v0, same bytes, same fields."""
    golden = capture(name)
    with connect(real_sim) as sock:
        sock.sendall(frame(bytes.fromhex(golden["request_hex"])))
        raw = read_frame(sock)
    decoded = ApiVersionsResponse.decode(raw, version=golden["request_version"], header=True)
    assert decoded.header.correlation_id == golden["response_header"]["correlation_id"]
    assert decoded.to_dict() == golden["response"]
    assert raw.hex() == golden["response_hex"]


def test_api_versions_v99_answers_error_35_with_v0_body_like_capture_41(
    real_sim: SimCluster,
) -> None:
    golden = capture("41")
    with connect(real_sim) as sock:
        sock.sendall(frame(bytes.fromhex(golden["request_hex"])))
        raw = read_frame(sock)
        assert raw.hex() == golden["response_hex"]
        # The connection stays usable: a client retries with a lower version.
        sock.sendall(frame(encode(ApiVersionsRequest(version=0), correlation_id=42)))
        again = ApiVersionsResponse.decode(read_frame(sock), version=0, header=True)
    assert again.header.correlation_id == 42
    assert again.error_code == 0


@pytest.mark.parametrize("use_real_state", [True, False])
def test_unsupported_describe_producers_v5_closes_without_response_like_capture_40(
    real_sim: SimCluster, sim: SimCluster, dispatcher: RecordingDispatcher, use_real_state: bool
) -> None:
    golden = capture("40")
    with connect(real_sim if use_real_state else sim) as sock:
        sock.sendall(frame(bytes.fromhex(golden["request_hex"])))
        assert_closed_without_response(sock)
    assert dispatcher.contexts == []


def test_unknown_api_key_closes_without_response(sim: SimCluster) -> None:
    with connect(sim) as sock:
        sock.sendall(frame(struct.pack(">hhih", 200, 0, 7, -1)))
        assert_closed_without_response(sock)


def test_advertised_but_unimplemented_api_closes_the_connection(sim: SimCluster) -> None:
    """DescribeProducers v0 is advertised (4.0 profile) but this dispatcher has no handler."""
    from kafka.protocol.admin.transactions import DescribeProducersRequest

    request = DescribeProducersRequest(version=0, topics=[])
    with connect(sim) as sock:
        sock.sendall(frame(encode(request, correlation_id=5)))
        assert_closed_without_response(sock)


def test_frames_split_across_many_reads_are_reassembled(sim: SimCluster) -> None:
    data = frame(encode(ApiVersionsRequest(version=0), correlation_id=11))
    with connect(sim) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(data)):  # size prefix and body, one byte per segment
            sock.sendall(data[i : i + 1])
            if i in (1, 5, 12):
                time.sleep(0.01)
        response = ApiVersionsResponse.decode(read_frame(sock), version=0, header=True)
    assert response.header.correlation_id == 11
    assert response.error_code == 0


def test_pipelined_requests_are_answered_in_order_with_their_correlation_ids(
    sim: SimCluster,
) -> None:
    requests = [
        (ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3),
        (MetadataRequest(version=12, topics=[]), 12),
        (ApiVersionsRequest(version=0), 0),
        (MetadataRequest(version=1, topics=[]), 1),
    ]
    batch = b"".join(
        frame(encode(request, correlation_id=100 + i)) for i, (request, _) in enumerate(requests)
    )
    with connect(sim) as sock:
        sock.sendall(batch)
        answers = [read_frame(sock) for _ in requests]
    for i, ((request, version), raw) in enumerate(zip(requests, answers, strict=True)):
        response_class = ApiVersionsResponse if request.API_KEY == 18 else MetadataResponse
        decoded = response_class.decode(raw, version=version, header=True)
        assert decoded.header.correlation_id == 100 + i


def test_flexible_response_has_header_v1_and_api_versions_keeps_header_v0(
    sim: SimCluster,
) -> None:
    with connect(sim) as sock:
        sock.sendall(frame(encode(MetadataRequest(version=12, topics=[]), correlation_id=9)))
        metadata = read_frame(sock)
        sock.sendall(frame(encode(MetadataRequest(version=8, topics=[]), correlation_id=10)))
        metadata_v8 = read_frame(sock)
    assert metadata[:5] == struct.pack(">i", 9) + b"\x00"  # correlation id + empty tag section
    assert MetadataResponse.decode(metadata, version=12, header=True).cluster_id == "sim"
    assert MetadataResponse.decode(metadata_v8, version=8, header=True).brokers[0].node_id == 1


def test_request_context_carries_header_fields_and_anonymous_principal(
    sim: SimCluster, dispatcher: RecordingDispatcher
) -> None:
    with connect(sim) as sock:
        sock.sendall(frame(encode(MetadataRequest(version=12, topics=[]), 77, "ctx-client")))
        read_frame(sock)
    assert dispatcher.contexts == [
        RequestContext(broker_id=1, api_key=3, api_version=12, correlation_id=77,
                       client_id="ctx-client", principal="User:ANONYMOUS")
    ]


def test_oversized_frame_closes_the_connection(sim: SimCluster) -> None:
    with connect(sim) as sock:
        sock.sendall(struct.pack(">i", 104_857_601))
        assert_closed_without_response(sock)


def test_api_versions_v3_with_invalid_software_name_is_invalid_request(sim: SimCluster) -> None:
    request = ApiVersionsRequest(version=3, client_software_name="-bad name",
                                 client_software_version="1.0")
    with connect(sim) as sock:
        sock.sendall(frame(encode(request, correlation_id=3)))
        raw = read_frame(sock)
    # INVALID_REQUEST (ApiVersionsRequest.isValid()), a v3 body like Kafka's getErrorResponse:
    # error_code, empty compact api_keys, throttle_time_ms, no tagged fields.
    assert raw == struct.pack(">ih", 3, 42) + b"\x01" + struct.pack(">i", 0) + b"\x00"


def test_sasl_handshake_on_plaintext_listener_is_illegal_sasl_state(sim: SimCluster) -> None:
    with connect(sim) as sock:
        sock.sendall(frame(encode(SaslHandshakeRequest(version=1, mechanism="PLAIN"), 4)))
        response = SaslHandshakeResponse.decode(read_frame(sock), version=1, header=True)
    assert response.error_code == 34


# --- SASL listener gating (SaslServerAuthenticator) ------------------------------------------


def test_sasl_listener_closes_on_a_request_before_authentication(
    sasl_sim: SimCluster, dispatcher: RecordingDispatcher
) -> None:
    with connect(sasl_sim) as sock:
        sock.sendall(frame(encode(MetadataRequest(version=12, topics=[]), correlation_id=1)))
        assert_closed_without_response(sock)
    assert dispatcher.contexts == []


def test_sasl_listener_answers_api_versions_once_then_requires_the_handshake(
    sasl_sim: SimCluster,
) -> None:
    with connect(sasl_sim) as sock:
        sock.sendall(frame(encode(ApiVersionsRequest(version=0), correlation_id=1)))
        assert ApiVersionsResponse.decode(read_frame(sock), version=0, header=True).error_code == 0
        sock.sendall(frame(encode(ApiVersionsRequest(version=0), correlation_id=2)))
        assert_closed_without_response(sock)


def test_sasl_unsupported_mechanism_lists_enabled_ones_then_closes(sasl_sim: SimCluster) -> None:
    with connect(sasl_sim) as sock:
        sock.sendall(frame(encode(SaslHandshakeRequest(version=1, mechanism="GSSAPI"), 1)))
        response = SaslHandshakeResponse.decode(read_frame(sock), version=1, header=True)
        assert response.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert_closed_without_response(sock)


def test_sasl_handshake_v0_then_raw_plain_token_authenticates_the_principal(
    sasl_sim: SimCluster, dispatcher: RecordingDispatcher
) -> None:
    with connect(sasl_sim) as sock:
        sock.sendall(frame(encode(SaslHandshakeRequest(version=0, mechanism="PLAIN"), 1)))
        handshake = SaslHandshakeResponse.decode(read_frame(sock), version=0, header=True)
        assert handshake.error_code == 0
        sock.sendall(frame(b"\x00alice\x00alice-secret"))  # no Kafka header after v0
        assert read_frame(sock) == b""  # PLAIN has an empty final challenge
        sock.sendall(frame(encode(MetadataRequest(version=12, topics=[]), correlation_id=2)))
        read_frame(sock)
    assert [ctx.principal for ctx in dispatcher.contexts] == ["User:alice"]


def test_sasl_handshake_v0_with_wrong_password_closes_without_response(
    sasl_sim: SimCluster,
) -> None:
    with connect(sasl_sim) as sock:
        sock.sendall(frame(encode(SaslHandshakeRequest(version=0, mechanism="PLAIN"), 1)))
        read_frame(sock)
        sock.sendall(frame(b"\x00alice\x00wrong"))
        assert_closed_without_response(sock)
