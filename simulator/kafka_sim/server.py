"""The simulator's network layer: Kafka's wire protocol over TCP, one listener per broker.

Behaviour copied from a real broker (Apache Kafka 4.0, captures in
tests/data/real-kafka-4.0; docs/kafka-semantics.md#wire-behaviour):
- 4-byte size framing; requests on one connection are handled one at a time and answered in
  order (Kafka mutes a channel until its response is sent), so pipelined requests just queue.
- Request header v1 (non-flexible) / v2 (flexible); response header v0 / v1, but ApiVersions
  always answers with header v0.
- ApiVersions with an unsupported version -> UNSUPPORTED_VERSION (35) with a v0 body listing only
  ApiVersions' own range (capture 41). Any other unsupported API key or version -> the
  connection is closed with no response (capture 40).
- SASL listeners follow SaslServerAuthenticator: ApiVersions (once) then SaslHandshake, then
  SaslAuthenticate (or raw tokens after SaslHandshake v0); anything else -> close; a failed
  login -> SASL_AUTHENTICATION_FAILED (58) after `connection.failed.authentication.delay.ms`,
  then close.
Everything a request *means* is answered by the `Dispatcher` (api.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import socket
import ssl
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.sasl import (
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)

from kafka_sim.api import Dispatcher, RequestContext
from kafka_sim.encode import decode_describe_producers_request
from kafka_sim.errors import (
    ILLEGAL_SASL_STATE,
    INVALID_REQUEST,
    NONE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    UNSUPPORTED_VERSION,
)
from kafka_sim.faults import NetworkFaults
from kafka_sim.sasl import SaslAuthenticationFailed, SaslAuthority, SaslServer
from kafka_sim.versions import VersionProfile

log = logging.getLogger(__name__)

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
DESCRIBE_PRODUCERS = 61


MAX_REQUEST_BYTES = 104_857_600
"""Kafka's socket.request.max.bytes default; a larger size prefix closes the connection."""

FAILED_AUTHENTICATION_DELAY_MS = 100
"""Kafka's connection.failed.authentication.delay.ms default."""

ANONYMOUS = "User:ANONYMOUS"

# ApiVersionsRequest.isValid (v3+): client software name and version must match this.
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

_PACKAGES = (
    kafka.protocol.admin,
    kafka.protocol.consumer,
    kafka.protocol.metadata,
    kafka.protocol.producer,
    kafka.protocol.sasl,
)


def _request_classes() -> dict[int, Any]:
    """api_key -> kafka-python request class.

    kafka-python keeps only a *response* registry (api_header.ResponseClassRegistry); the request
    classes are found by walking ApiMessage's subclasses once the protocol packages are imported.
    """
    assert _PACKAGES  # the imports above register every generated message class
    classes: dict[int, Any] = {}
    pending: list[Any] = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", 0) is None and cls.is_request():
            classes[int(cls.API_KEY)] = cls
    return classes


REQUEST_CLASSES: Mapping[int, Any] = _request_classes()


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, from which parts are set."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslAuthority | None = None
    failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS

    @property
    def security_protocol(self) -> str:
        if self.sasl is not None:
            return "SASL_SSL" if self.ssl_context is not None else "SASL_PLAINTEXT"
        return "SSL" if self.ssl_context is not None else "PLAINTEXT"


ClientAuth = Literal["none", "requested", "required"]


def server_ssl_context(
    cert_file: str,
    key_file: str,
    ca_file: str | None = None,
    client_auth: ClientAuth = "none",
) -> ssl.SSLContext:
    """A listener's TLS context; `client_auth` mirrors Kafka's ssl.client.auth."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    if client_auth != "none":
        if ca_file is None:
            raise ValueError("client certificate authentication needs ca_file")
        context.load_verify_locations(ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


_RDN_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "streetAddress": "STREET",
    "userId": "UID",
}


def _ssl_principal(peercert: Any) -> str:
    """Kafka's default SSL principal: "User:" + subject DN in RFC 2253 order (last RDN first)."""
    if not peercert or "subject" not in peercert:
        return ANONYMOUS
    rdns = []
    for rdn in reversed(peercert["subject"]):
        rdns.append("+".join(f"{_RDN_SHORT_NAMES.get(k, k)}={v}" for k, v in rdn))
    return "User:" + ",".join(rdns)


class _SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = enum.auto()
    HANDSHAKE = enum.auto()
    AUTHENTICATE = enum.auto()  # after SaslHandshake v1: SaslAuthenticate requests
    AUTHENTICATE_RAW = enum.auto()  # after SaslHandshake v0: raw size-prefixed tokens
    COMPLETE = enum.auto()


@dataclass(eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    principal: str
    sasl_state: _SaslState
    task: asyncio.Task[None] | None = None
    sasl_server: SaslServer | None = None
    sasl_mechanism: str = ""
    session_expired: Callable[[], bool] | None = None
    """Set by a SASL server that ends sessions (KIP-368); True once this one is over."""
    peer: str = field(default="")


def _response_frame_parts(
    response: Any, api_key: int, version: int, correlation_id: int
) -> tuple[bytes, bytes]:
    """(response header, body). Header v1 carries an empty tagged-field section."""
    body = bytes(response.encode(version=version))
    flexible_header = api_key != API_VERSIONS and bool(response.flexible_version_q(version))
    header = struct.pack(">i", correlation_id) + (b"\x00" if flexible_header else b"")
    return header, body


class BrokerListener:
    """One broker's TCP listener and its connections, all on the simulator's event loop."""

    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        dispatcher: Dispatcher,
        profile: VersionProfile,
        faults: NetworkFaults,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self._dispatcher = dispatcher
        self._profile = profile
        self._faults = faults
        self._security = security or ListenerSecurity()
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        """Listen (again) on `port`; port 0 picks a free one, kept for later restarts."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._serve_connection,
            self.host,
            self.port,
            ssl=self._security.ssl_context,
            reuse_address=True,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("broker %d listening on %s:%d", self.broker_id, self.host, self.port)

    async def stop(self) -> None:
        """Close the listener (new connections are refused) and drop every open connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = []
        for conn in list(self._connections):
            conn.writer.transport.abort()
            if conn.task is not None:
                conn.task.cancel()
                tasks.append(conn.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        log.info("broker %d stopped", self.broker_id)

    # --- connection loop -------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        principal = ANONYMOUS
        if self._security.ssl_context is not None and self._security.sasl is None:
            principal = _ssl_principal(writer.get_extra_info("peercert"))
        conn = _Connection(
            reader=reader,
            writer=writer,
            principal=principal,
            sasl_state=(
                _SaslState.HANDSHAKE_OR_VERSIONS
                if self._security.sasl is not None
                else _SaslState.COMPLETE
            ),
            task=asyncio.current_task(),
            peer=str(writer.get_extra_info("peername")),
        )
        self._connections.add(conn)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                if not 0 <= size <= MAX_REQUEST_BYTES:
                    log.warning(
                        "broker %d: bad frame size %d from %s", self.broker_id, size, conn.peer
                    )
                    break
                payload = await reader.readexactly(size)
                if not await self._on_frame(conn, payload):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
            pass  # the client went away
        except asyncio.CancelledError:
            # stop() cancels connection tasks; ending normally keeps asyncio's
            # client_connected_cb callback from logging the cancellation as an error.
            pass
        except Exception:
            log.exception("broker %d: connection from %s failed", self.broker_id, conn.peer)
        finally:
            self._connections.discard(conn)
            writer.close()

    async def _on_frame(self, conn: _Connection, payload: bytes) -> bool:
        """Handle one request frame; False closes the connection."""
        if conn.sasl_state is _SaslState.AUTHENTICATE_RAW:
            return await self._on_raw_sasl_token(conn, payload)
        if len(payload) < 8:
            log.warning("broker %d: short request header from %s", self.broker_id, conn.peer)
            return False
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", payload)

        if (conn.sasl_state is _SaslState.COMPLETE and conn.session_expired is not None
                and api_key != SASL_HANDSHAKE and conn.session_expired()):
            # KIP-368: a request other than SaslHandshake (re-authentication) after the SASL
            # session's end closes the connection, unanswered.
            log.info("broker %d: SASL session of %s expired; closing", self.broker_id, conn.peer)
            return False

        if api_key == API_VERSIONS:
            return await self._on_api_versions(conn, api_version, correlation_id, payload)
        if conn.sasl_state is not _SaslState.COMPLETE:
            return await self._on_sasl_request(conn, api_key, api_version, payload)

        if not self._version_supported(api_key, api_version):
            # Capture 40: no response, the broker just closes the connection.
            log.info(
                "broker %d: unsupported %d v%d from %s; closing",
                self.broker_id,
                api_key,
                api_version,
                conn.peer,
            )
            return False
        decoded = self._decode(api_key, api_version, payload)
        if decoded is None:
            return False
        request, client_id = decoded

        if api_key == SASL_HANDSHAKE:
            # KafkaApis answers handshakes outside authentication with ILLEGAL_SASL_STATE.
            return await self._send(
                conn,
                api_key,
                api_version,
                correlation_id,
                SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[]),
            )
        if api_key == SASL_AUTHENTICATE:
            return await self._send(
                conn,
                api_key,
                api_version,
                correlation_id,
                SaslAuthenticateResponse(
                    error_code=ILLEGAL_SASL_STATE,
                    error_message="SaslAuthenticate request received after"
                    " successful authentication",
                    auth_bytes=b"",
                    session_lifetime_ms=0,
                ),
            )

        ctx = RequestContext(
            broker_id=self.broker_id,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
            principal=conn.principal,
        )
        try:
            response = self._dispatcher.handle(ctx, request)
        except NotImplementedError:
            log.warning(
                "broker %d: no handler for advertised API %d v%d; closing connection",
                self.broker_id,
                api_key,
                api_version,
            )
            return False
        except Exception:
            log.exception(
                "broker %d: dispatcher failed on API %d v%d; closing connection",
                self.broker_id,
                api_key,
                api_version,
            )
            return False
        if response is None:
            return True  # e.g. Produce with acks=0
        return await self._send(conn, api_key, api_version, correlation_id, response)

    def _version_supported(self, api_key: int, api_version: int) -> bool:
        supported = self._dispatcher.supported_versions(self.broker_id).get(api_key)
        return supported is not None and supported[0] <= api_version <= supported[1]

    def _decode(
        self, api_key: int, api_version: int, payload: bytes
    ) -> tuple[Any, str | None] | None:
        if api_key == DESCRIBE_PRODUCERS:  # the request that grows with the partitions
            lean = decode_describe_producers_request(payload)
            if lean is not None:
                return lean, lean.header.client_id
        cls = REQUEST_CLASSES.get(api_key)
        if cls is None or api_version > cls.max_version:
            log.warning(
                "broker %d: kafka-python cannot decode API %d v%d; closing",
                self.broker_id,
                api_key,
                api_version,
            )
            return None
        try:
            request = cls.decode(payload, version=api_version, header=True)
        except Exception:
            # Kafka closes the connection on an InvalidRequestException.
            log.warning(
                "broker %d: undecodable API %d v%d request; closing",
                self.broker_id,
                api_key,
                api_version,
                exc_info=True,
            )
            return None
        return request, request.header.client_id

    # --- ApiVersions -------------------------------------------------------------------------

    def _api_versions_range(self) -> tuple[int, int]:
        versions = self._dispatcher.supported_versions(self.broker_id)
        return versions.get(API_VERSIONS, (0, int(ApiVersionsRequest.max_version)))

    def api_versions_response(self, version: int) -> Any:
        """This broker's ApiVersions answer at `version` (v0-v2 carry no features)."""
        versions = self._dispatcher.supported_versions(self.broker_id)
        api_keys = [
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in versions.items()
        ]
        # KIP-1022: v0-v3 leave out supported features whose min version is 0 (capture 01 vs 03).
        supported = [
            ApiVersionsResponse.SupportedFeatureKey(
                name=f.name, min_version=f.min_version, max_version=f.max_version
            )
            for f in self._profile.supported_features_for(version)
        ]
        finalized = [
            ApiVersionsResponse.FinalizedFeatureKey(
                name=f.name,
                max_version_level=f.max_version_level,
                min_version_level=f.min_version_level,
            )
            for f in self._profile.finalized_features
        ]
        return ApiVersionsResponse(
            error_code=NONE,
            api_keys=api_keys,
            throttle_time_ms=0,
            supported_features=supported,
            finalized_features_epoch=self._profile.finalized_features_epoch,
            finalized_features=finalized,
            zk_migration_ready=False,
        )

    async def _on_api_versions(
        self, conn: _Connection, api_version: int, correlation_id: int, payload: bytes
    ) -> bool:
        if conn.sasl_state not in (_SaslState.HANDSHAKE_OR_VERSIONS, _SaslState.COMPLETE):
            log.info(
                "broker %d: ApiVersions during SASL state %s; closing",
                self.broker_id,
                conn.sasl_state.name,
            )
            return False
        lo, hi = self._api_versions_range()
        if not lo <= api_version <= hi:
            # Capture 41: error 35, v0 body listing only ApiVersions' own range, header v0.
            response = ApiVersionsResponse(
                error_code=UNSUPPORTED_VERSION,
                api_keys=[
                    ApiVersionsResponse.ApiVersion(
                        api_key=API_VERSIONS, min_version=lo, max_version=hi
                    )
                ],
            )
            return await self._send(conn, API_VERSIONS, 0, correlation_id, response)
        decoded = self._decode(API_VERSIONS, api_version, payload)
        if decoded is None:
            return False
        request, _ = decoded
        if api_version >= 3 and not (
            _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_name or "")
            and _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_version or "")
        ):
            response = ApiVersionsResponse(
                error_code=INVALID_REQUEST, api_keys=[], throttle_time_ms=0
            )
            return await self._send(conn, API_VERSIONS, api_version, correlation_id, response)
        if conn.sasl_state is _SaslState.HANDSHAKE_OR_VERSIONS:
            conn.sasl_state = _SaslState.HANDSHAKE
        return await self._send(
            conn, API_VERSIONS, api_version, correlation_id, self.api_versions_response(api_version)
        )

    # --- SASL --------------------------------------------------------------------------------

    async def _on_sasl_request(
        self, conn: _Connection, api_key: int, api_version: int, payload: bytes
    ) -> bool:
        sasl = self._security.sasl
        assert sasl is not None
        expected = (
            SASL_AUTHENTICATE if conn.sasl_state is _SaslState.AUTHENTICATE else SASL_HANDSHAKE
        )
        if api_key != expected or not self._version_supported(api_key, api_version):
            # SaslServerAuthenticator: "Unexpected Kafka request of type ... during SASL
            # handshake" -> IllegalSaslStateException -> the channel is closed.
            log.info(
                "broker %d: API %d v%d before SASL authentication from %s; closing",
                self.broker_id,
                api_key,
                api_version,
                conn.peer,
            )
            return False
        decoded = self._decode(api_key, api_version, payload)
        if decoded is None:
            return False
        request, _ = decoded
        correlation_id = request.header.correlation_id

        if api_key == SASL_HANDSHAKE:
            mechanism = request.mechanism
            if mechanism not in sasl.mechanisms:
                await self._send(
                    conn,
                    api_key,
                    api_version,
                    correlation_id,
                    SaslHandshakeResponse(
                        error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=list(sasl.mechanisms)
                    ),
                )
                return False
            conn.sasl_server = sasl.new_server(mechanism)
            conn.sasl_mechanism = mechanism
            conn.sasl_state = (
                _SaslState.AUTHENTICATE if api_version >= 1 else _SaslState.AUTHENTICATE_RAW
            )
            return await self._send(
                conn,
                api_key,
                api_version,
                correlation_id,
                SaslHandshakeResponse(error_code=NONE, mechanisms=list(sasl.mechanisms)),
            )

        assert conn.sasl_server is not None
        try:
            challenge = conn.sasl_server.evaluate(bytes(request.auth_bytes))
        except SaslAuthenticationFailed as exc:
            await self._authentication_failed(conn, exc)
            await self._send(
                conn,
                api_key,
                api_version,
                correlation_id,
                SaslAuthenticateResponse(
                    error_code=SASL_AUTHENTICATION_FAILED,
                    error_message=str(exc),
                    auth_bytes=b"",
                    session_lifetime_ms=0,
                ),
            )
            return False
        lifetime_ms = int(getattr(conn.sasl_server, "session_lifetime_ms", 0))
        self._maybe_complete_sasl(conn)
        return await self._send(
            conn,
            api_key,
            api_version,
            correlation_id,
            SaslAuthenticateResponse(
                error_code=NONE, error_message=None, auth_bytes=challenge,
                session_lifetime_ms=lifetime_ms,
            ),
        )

    async def _on_raw_sasl_token(self, conn: _Connection, token: bytes) -> bool:
        """After SaslHandshake v0 the tokens travel as bare size-prefixed frames."""
        assert conn.sasl_server is not None
        try:
            challenge = conn.sasl_server.evaluate(token)
        except SaslAuthenticationFailed as exc:
            # No way to report an error without Kafka headers: close after the delay.
            await self._authentication_failed(conn, exc)
            return False
        self._maybe_complete_sasl(conn)
        return await self._send_payload(conn, SASL_AUTHENTICATE, challenge)

    async def _authentication_failed(
        self, conn: _Connection, exc: SaslAuthenticationFailed
    ) -> None:
        """Log, then hold the answer back for connection.failed.authentication.delay.ms, as
        Kafka does to slow down password guessing."""
        log.info(
            "broker %d: SASL %s authentication failed from %s: %s",
            self.broker_id,
            conn.sasl_mechanism,
            conn.peer,
            exc,
        )
        await asyncio.sleep(self._security.failed_authentication_delay_ms / 1000)

    def _maybe_complete_sasl(self, conn: _Connection) -> None:
        server = conn.sasl_server
        if server is not None and server.complete:
            conn.session_expired = getattr(server, "session_expired", None)
            conn.principal = f"User:{server.username}"
            conn.sasl_state = _SaslState.COMPLETE
            conn.sasl_server = None
            log.info(
                "broker %d: %s authenticated via SASL/%s",
                self.broker_id,
                conn.principal,
                conn.sasl_mechanism,
            )

    # --- sending, with injected faults -------------------------------------------------------

    async def _send(
        self,
        conn: _Connection,
        api_key: int,
        api_version: int,
        correlation_id: int,
        response: Any,
    ) -> bool:
        header, body = _response_frame_parts(response, api_key, api_version, correlation_id)
        omission = self._faults.take_omission(self.broker_id, api_key)
        if omission is not None:
            body = omission.apply(response, api_version)
        rewrite = self._faults.take_rewrite(self.broker_id, api_key)
        if rewrite is not None:
            body = rewrite.apply(response, api_version)
        return await self._send_payload(conn, api_key, body, header)

    async def _send_payload(
        self, conn: _Connection, api_key: int, body: bytes, header: bytes = b""
    ) -> bool:
        """Write one size-prefixed frame, applying latency and response faults; False = closed."""
        latency_ms = self._faults.latency_ms(self.broker_id, api_key)
        if latency_ms:
            await asyncio.sleep(latency_ms / 1000)
        fault = self._faults.take_response_fault(self.broker_id, api_key)
        if fault == "malformed":
            # Same size prefix semantics and correlation id, but half the body: undecodable.
            body = body[: len(body) // 2]
        payload = header + body
        frame = struct.pack(">i", len(payload)) + payload
        if fault == "oversized":
            # The size prefix claims 2 GiB - 1; the answer's own bytes follow. A client that
            # trusts the prefix waits for (or allocates) 2 GiB.
            frame = struct.pack(">i", 2**31 - 1) + payload
            log.info("broker %d: injected 2 GiB size prefix (API %d)", self.broker_id, api_key)
        writer = conn.writer
        if fault == "truncate":
            # The broker died mid-write: part of the frame, then FIN.
            writer.write(frame[: len(frame) // 2])
            await writer.drain()
            writer.close()
            log.info("broker %d: injected truncated response (API %d)", self.broker_id, api_key)
            return False
        if fault == "reset":
            writer.write(frame[: len(frame) // 2])
            await writer.drain()
            await self._reset(writer)
            log.info("broker %d: injected connection reset (API %d)", self.broker_id, api_key)
            return False
        writer.write(frame)
        await writer.drain()
        return True

    @staticmethod
    async def _reset(writer: asyncio.StreamWriter) -> None:
        """Abort with SO_LINGER 0 so the kernel sends RST, once written bytes have left."""
        transport = writer.transport
        for _ in range(200):
            if transport.get_write_buffer_size() == 0:
                break
            await asyncio.sleep(0.005)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
