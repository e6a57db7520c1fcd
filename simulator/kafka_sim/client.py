"""A raw Kafka client: one blocking TCP connection speaking Kafka's framing and headers.

Why raw: tests and the demo need exact control of every request (captured bytes replayed verbatim,
states a well-behaved client cannot make). Each connection negotiates with ApiVersions as a real
client does (KIP-511) and `api_version()` picks, per API, the highest version kafka-python's
classes, the broker and the caller's preferred maximum all allow.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from kafka.protocol.admin.configs import DescribeConfigsRequest as _DescribeConfigsRequest
from kafka.protocol.admin.transactions import DescribeProducersRequest as _DescribeProducersRequest
from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest as _FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest as _ListOffsetsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as _ApiVersionsRequest

from kafka_sim import __version__
from kafka_sim.errors import NONE, UNSUPPORTED_VERSION

# Imported for their side effect: every response class registers itself by API key.
_REGISTERED = (
    _DescribeConfigsRequest,
    _DescribeProducersRequest,
    _FetchRequest,
    _ListOffsetsRequest,
    _ApiVersionsRequest,
)

__all__ = [
    "ConnectionClosedError",
    "KafkaProtocolError",
    "RawKafkaClient",
    "VersionRange",
    "parse_bootstrap",
    "request_class",
    "response_class",
]


class VersionRange(NamedTuple):
    """The versions of one request this module can send: `lowest` is where the fields it sets
    exist; `preferred` is the highest it sends even when client and broker know newer ones."""

    lowest: int
    preferred: int



API_VERSIONS = 18


class KafkaProtocolError(Exception):
    """A request answered with a non-zero error code."""

    def __init__(self, what: str, error_code: int) -> None:
        super().__init__(f"{what}: error_code={error_code}")
        self.error_code = error_code


class ConnectionClosedError(EOFError):
    """The broker closed the connection without (a complete) reply."""


def _all_api_message_classes() -> Iterable[type[Any]]:
    stack: list[type[Any]] = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None:
            yield cls


_REQUEST_CLASSES: dict[int, type[Any]] = {}


def request_class(api_key: int) -> type[Any]:
    """kafka-python's request class for an API key."""
    if not _REQUEST_CLASSES:
        for cls in _all_api_message_classes():
            try:
                if cls.is_request():
                    _REQUEST_CLASSES.setdefault(int(cls.API_KEY), cls)
            except (AttributeError, TypeError):  # abstract bases
                continue
    return _REQUEST_CLASSES[api_key]


def response_class(api_key: int, api_version: int) -> type[Any]:
    """kafka-python's response class for an API key and version."""
    header = RequestHeader(
        request_api_key=api_key, request_api_version=api_version, correlation_id=0, client_id=""
    )
    cls = ResponseClassRegistry.get_response_class(header)
    if cls is None:
        raise KeyError(f"no response class for api_key={api_key}")
    return cls  # type: ignore[no-any-return]


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' (or a list of 'h:p') -> [(host, port), ...]."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"empty bootstrap address: {bootstrap!r}")
    return out


class RawKafkaClient:
    """One blocking TCP connection speaking Kafka's framing (4-byte size prefix).

    `request()` encodes a kafka-python request object with its header (v1, or v2 for flexible
    versions), reads the framed reply and decodes it with the matching response class.
    `send_raw()`/`receive_raw()` move bytes verbatim (captured requests). `api_version()` picks
    a version from the broker's ApiVersions answer, asked once (`negotiate()`): connections
    that only replay captured bytes never send it, so they carry exactly the captured traffic.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kafka-txn-exporter-workload",
        timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._broker_versions: dict[int, tuple[int, int]] | None = None

    def __enter__(self) -> RawKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def settimeout(self, timeout_s: float | None) -> None:
        self._sock.settimeout(timeout_s)

    def send_raw(self, payload: bytes) -> None:
        """Send one request: header + body, without the size prefix (added here)."""
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _read_exact(self, n: int) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while got < n:
            chunk = self._sock.recv(n - got)
            if not chunk:
                raise ConnectionClosedError(f"connection closed by broker after {got} of {n} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def receive_raw(self) -> bytes:
        """One response frame without its size prefix (response header included)."""
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def exchange_raw(self, payload: bytes) -> bytes:
        with self._lock:
            self.send_raw(payload)
            return self.receive_raw()

    def encode_request(self, request: Any, correlation_id: int | None = None) -> bytes:
        cid = next(self._correlation_ids) if correlation_id is None else correlation_id
        request.with_header(correlation_id=cid, client_id=self.client_id)
        return bytes(request.encode(header=True))

    def request(self, request: Any, *, correlation_id: int | None = None) -> Any:
        """Send a kafka-python request object; return its decoded response (None for acks=0)."""
        payload = self.encode_request(request, correlation_id)
        cid = request.header.correlation_id
        with self._lock:
            self.send_raw(payload)
            if not request.expect_response():
                return None
            raw = self.receive_raw()
        resp_cls = response_class(request.API_KEY, request.API_VERSION)
        response = resp_cls.decode(raw, version=request.API_VERSION, header=True)
        got = response.header.correlation_id
        if got != cid:
            raise KafkaProtocolError(f"correlation id {got} != {cid}", -1)
        return response

    def negotiate(self) -> dict[int, tuple[int, int]]:
        """The broker's (min, max) version per API key, from one ApiVersions exchange.

        Sent at kafka-python's highest ApiVersions version, as a client does (KIP-511): a broker
        that does not know that version answers UNSUPPORTED_VERSION with a v0 body naming its
        own ApiVersions range (capture 41), and the request is sent again inside that range.
        """
        if self._broker_versions is not None:
            return self._broker_versions
        version = int(_ApiVersionsRequest.max_version)
        while True:
            req = _ApiVersionsRequest[version](
                client_software_name="kafka-txn-sim", client_software_version=__version__
            )
            payload = self.encode_request(req)
            raw = self.exchange_raw(payload)
            # Response header v0 (correlation id), then error_code in every version's body.
            (error_code,) = struct.unpack_from(">h", raw, 4)
            answered = 0 if error_code == UNSUPPORTED_VERSION else version
            resp = response_class(API_VERSIONS, answered).decode(raw, version=answered, header=True)
            ranges = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys
            }
            if error_code == NONE:
                self._broker_versions = ranges
                return ranges
            broker_max = ranges.get(API_VERSIONS, (0, -1))[1]
            if error_code != UNSUPPORTED_VERSION or not 0 <= broker_max < version:
                raise KafkaProtocolError(f"ApiVersions v{version}", error_code)
            version = broker_max

    def api_version(self, api_key: int, usable: VersionRange) -> int:
        """Highest version of `api_key` that kafka-python's request class, the broker and
        `usable` all allow."""
        cls = request_class(api_key)
        broker_min, broker_max = self.negotiate().get(api_key, (0, -1))
        lowest = max(usable.lowest, int(cls.min_version), broker_min)
        highest = min(usable.preferred, int(cls.max_version), broker_max)
        if highest < lowest:
            raise KafkaProtocolError(
                f"no version of API {api_key} in {usable} that {self.host}:{self.port} "
                f"(v{broker_min}-v{broker_max}) and kafka-python "
                f"(v{cls.min_version}-v{cls.max_version}) share",
                UNSUPPORTED_VERSION,
            )
        return highest

