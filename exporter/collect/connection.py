"""A lean asyncio connection to one Kafka broker.

Why not kafka-python's own network layer (`kafka/net/manager.py`, `connection.py`)? It runs its
own selector-based event loop, is coupled to its `ClusterMetadata`/bootstrap logic, and closes the
whole connection when any single request times out (failing every other request in flight). The
exporter needs many requests pipelined to many brokers at once, each with its own timeout, owned
by a poller that may run from any scheduler thread. So this module keeps only what is needed:

- framing (4-byte size), correlation ids and pipelining (many requests in flight per socket;
  Kafka answers them in order, a late answer to a timed-out request is simply dropped);
- ApiVersions negotiation per broker, so each request uses the best version both sides support;
- TLS through an `ssl.SSLContext` built from `TlsSettings`;
- SASL via kafka-python's mechanism classes, with the options the cluster's login gives
  (`exporter/collect/sasl/`: one login per cluster, shared by its connections).

Encoding and decoding are kafka-python's generated protocol classes (`kafka.protocol.*`),
except for a `fastencode.LeanRequest` (DescribeProducers, ListOffsets: body written by hand)
and where a caller passes a lean decoder (`fastdecode.py`: Metadata, DescribeProducers, Fetch).
Every failure surfaces as a typed `CollectError`; nothing here crashes a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from exporter.collect.errors import UNSUPPORTED_VERSION, error_name
from exporter.collect.failures import (
    AuthenticationFailed as AuthenticationFailed,
)
from exporter.collect.failures import (
    BrokerUnreachable as BrokerUnreachable,
)
from exporter.collect.failures import (  # re-exported: where callers import them from
    CollectError as CollectError,
)
from exporter.collect.failures import (
    ConnectTimeout as ConnectTimeout,
)
from exporter.collect.failures import (
    DecodeError as DecodeError,
)
from exporter.collect.failures import (
    RequestTimeout as RequestTimeout,
)
from exporter.collect.failures import (
    ResponseTooLarge as ResponseTooLarge,
)
from exporter.collect.failures import (
    TlsConnectionClosed as TlsConnectionClosed,
)
from exporter.collect.failures import (
    TlsFailed as TlsFailed,
)
from exporter.collect.failures import (
    UnsupportedApi as UnsupportedApi,
)
from exporter.collect.fastdecode import Decoder, decode_response
from exporter.collect.fastencode import LeanRequest
from exporter.collect.loop import DESCRIPTOR_ERRNOS, connect_slots, descriptors_exhausted
from exporter.collect.parse import parse_finalized_features
from exporter.collect.sasl.login import SaslLogin
from exporter.model import FinalizedFeatures
from exporter.settings import DEFAULT_MAX_RESPONSE_BYTES, SaslSettings, TlsSettings
from exporter.tlsfiles import load_cert_chain, require_regular_file

_SIZE = struct.Struct(">i")
REAUTHENTICATE_FACTOR = 0.85
REAUTHENTICATE_JITTER = 0.10
CLIENT_SOFTWARE_NAME = "kafka-txn-exporter"
CLIENT_SOFTWARE_VERSION = "0.1.0"


_SASL_FAILURE_HINTS = {
    "AWS_MSK_IAM": " (AWS MSK IAM: check that the IAM policy allows kafka-cluster:Connect on "
    "this cluster, that the region is the cluster's, and this host's clock: a signature "
    "more than 5 minutes off is refused)",
}
"""What to check when the broker refuses a mechanism whose broker-side reasons are not sent."""


def build_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A client TLS context that verifies the broker (against `ca_file` or the system store)."""
    if tls.ca_file is not None:
        require_regular_file(tls.ca_file, "tls.ca_file")
    context = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file:
        # Never OpenSSL's interactive "Enter PEM pass phrase:"; ConfigError names the field.
        load_cert_chain(context, tls.cert_file, tls.key_file or tls.cert_file, tls.key_password,
                        "tls")
    context.check_hostname = tls.check_hostname
    return context


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    client_id: str
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslSettings | None = None
    login: SaslLogin | None = None
    """The cluster's login for `sasl` (`exporter.collect.sasl.logins.make_login`), shared by
    every connection; required with `sasl`. (Made by the caller, not here: a login module
    raises this module's errors, so this module never imports the logins.)"""
    connect_timeout_seconds: float = 10.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """Frames above this fail the connection as soon as their 4-byte length is read."""


class BrokerConnection:
    """One TCP (optionally TLS) connection, negotiated and authenticated, with pipelining."""

    def __init__(self, host: str, port: int, options: ConnectionOptions) -> None:
        self.host = host
        self.port = port
        self._options = options
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[Decoder, int, asyncio.Future[Any]]] = {}
        self._next_correlation_id = 0
        self._closed_error: CollectError | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._api_versions_version = 0
        self.finalized_features: FinalizedFeatures | None = None
        """From the last ApiVersions answer (v3+); None when it carried none."""
        self.finalized_features_read_at = 0.0
        """`time.monotonic()` of that answer."""
        self.session_lifetime_ms = 0
        """The SASL session lifetime the broker announced (KIP-368); 0: none."""
        self.reauthenticate_at: float | None = None
        """`time.monotonic()` after which this connection is replaced by a new one: the broker
        limits its SASL session (`connections.max.reauth.ms`, or the token's expiry) and closes
        a connection whose session has ended on its next request."""

    @property
    def is_open(self) -> bool:
        return self._writer is not None and self._closed_error is None and (
            self.reauthenticate_at is None or time.monotonic() < self.reauthenticate_at)

    @property
    def session_ended(self) -> bool:
        """Its SASL session lifetime is over: a new connection must log in again."""
        return self.reauthenticate_at is not None and time.monotonic() >= self.reauthenticate_at

    @property
    def lost(self) -> bool:
        """The connection failed or the broker closed it (seen by its reader, also between
        requests): the broker may have stopped."""
        return self._closed_error is not None

    @property
    def is_idle(self) -> bool:
        """No request of this connection awaits its answer."""
        return not self._pending

    async def connect(self) -> None:
        """Open the socket, negotiate ApiVersions, authenticate. Raises `CollectError`."""
        timeout = self._options.connect_timeout_seconds
        try:
            async with connect_slots():
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        self.host,
                        self.port,
                        ssl=self._options.ssl_context,
                        server_hostname=self.host if self._options.ssl_context else None,
                        limit=2**20,
                    ),
                    timeout,
                )
        except TimeoutError as exc:
            raise ConnectTimeout(
                f"connect to {self.host}:{self.port} timed out after {timeout:g} s"
            ) from exc
        except ssl.SSLError as exc:
            raise TlsFailed(f"TLS handshake with {self.host}:{self.port}: {exc}") from exc
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
            if self._options.ssl_context is None:
                raise BrokerUnreachable(f"connect to {self.host}:{self.port}: {exc!r}") from exc
            # TCP was up: the only exchange yet is the handshake.
            raise TlsConnectionClosed(
                f"TLS handshake with {self.host}:{self.port}: the broker closed the connection "
                f"({exc!r}); does this listener speak TLS?"
            ) from exc
        except OSError as exc:
            if exc.errno in DESCRIPTOR_ERRNOS:
                descriptors_exhausted(exc)
            raise BrokerUnreachable(
                f"connect to {self.host}:{self.port}: {exc or repr(exc)}"
            ) from exc
        except (OverflowError, ValueError) as exc:
            # An address no socket can use: a port outside 0-65535, a NUL in the host, a name
            # IDNA cannot encode. It comes from config or from a broker's Metadata answer; it
            # is this broker's failure, not the whole poll's.
            raise BrokerUnreachable(
                f"connect to {self.host!r}:{self.port}: invalid address: {exc}"
            ) from exc
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate_api_versions(timeout)
            if self._options.sasl is not None:
                await self._authenticate(self._options.sasl, timeout)
        except BaseException:
            await self.close()
            raise

    async def _negotiate_api_versions(self, timeout: float) -> None:
        # Kafka answers an unsupported ApiVersions version with error 35 and a v0 body that
        # lists the versions it does support (reference capture 41).
        version = ApiVersionsRequest.max_version
        for _ in range(3):
            request = ApiVersionsRequest(
                client_software_name=CLIENT_SOFTWARE_NAME,
                client_software_version=CLIENT_SOFTWARE_VERSION,
                version=version,
            )
            response = await self._send(request, version, timeout)
            versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            if response.error_code == 0:
                self.api_versions = versions
                self._api_versions_version = version
                self.finalized_features = parse_finalized_features(response, version)
                self.finalized_features_read_at = time.monotonic()
                return
            own = versions.get(ApiVersionsResponse.API_KEY)
            if response.error_code == UNSUPPORTED_VERSION and own is not None:
                version = min(version - 1, own[1])
                if version >= 0:
                    continue
            raise UnsupportedApi(f"ApiVersions failed: {error_name(response.error_code)}")
        raise UnsupportedApi("ApiVersions negotiation did not converge")

    async def refresh_finalized_features(self, timeout: float) -> FinalizedFeatures | None:
        """Ask ApiVersions again (at the version negotiated) for the finalized features, which
        change without a reconnect (`kafka-features.sh upgrade`). Raises `CollectError`."""
        version = self._api_versions_version
        request = ApiVersionsRequest(
            client_software_name=CLIENT_SOFTWARE_NAME,
            client_software_version=CLIENT_SOFTWARE_VERSION,
            version=version,
        )
        response = await self._send(request, version, timeout)
        self.finalized_features = parse_finalized_features(response, version)
        self.finalized_features_read_at = time.monotonic()
        return self.finalized_features

    async def _authenticate(self, sasl: SaslSettings, timeout: float) -> None:
        """SaslHandshake v1 then SaslAuthenticate rounds driven by kafka-python's mechanism.

        The login names the mechanism spoken on the wire, which may differ from the configured
        one (AWS_MSK_IAM is spoken as OAUTHBEARER); messages name the configured one."""
        login = self._options.login
        if login is None:
            raise AuthenticationFailed(f"SASL {sasl.mechanism}: no login for this connection")
        wire_mechanism = login.mechanism
        handshake_version = self.version_for(SaslHandshakeRequest)
        handshake = await self._send(
            SaslHandshakeRequest(mechanism=wire_mechanism, version=handshake_version),
            handshake_version,
            timeout,
        )
        if handshake.error_code != 0:
            enabled = list(handshake.mechanisms)
            hint = "" if enabled else ": this listener takes no SASL (PLAINTEXT or SSL)"
            spoken = "" if wire_mechanism == sasl.mechanism else f" (as {wire_mechanism})"
            raise AuthenticationFailed(
                f"SASL mechanism {sasl.mechanism}{spoken} refused by {self.host}:{self.port}: "
                f"{error_name(handshake.error_code)} (enabled: {enabled}){hint}"
            )
        security_protocol = "SASL_SSL" if self._options.ssl_context else "SASL_PLAINTEXT"
        # Here, not at the top: kafka.net is kafka-python's whole network client, which only
        # SASL needs (its mechanisms), and `scan` of a cluster without SASL should not load.
        from kafka.net.sasl import get_sasl_mechanism

        options = await login.mechanism_options()
        try:
            # A login may bring its own mechanism class (GSSAPI: to hand the cluster's
            # credentials to the exchange, which kafka-python's own class does not take).
            own_class = getattr(login, "mechanism_class", None)
            make = functools.partial(
                own_class or get_sasl_mechanism(wire_mechanism),
                host=self.host,
                security_protocol=security_protocol,
                sasl_mechanism=wire_mechanism,
                **options,
            )
            # A login's own class may ask a server while it is made (GSSAPI: the KDC for the
            # broker's service ticket): in a thread, so that the other connections go on.
            mechanism = await asyncio.to_thread(make) if own_class is not None else make()
        except (KeyError, kafka_errors.KafkaError) as exc:
            raise AuthenticationFailed(f"unsupported SASL mechanism {sasl.mechanism}") from exc
        version = self.version_for(SaslAuthenticateRequest)
        rounds = 0
        response: Any = None
        while not mechanism.is_done():
            rounds += 1
            if rounds > 5:
                raise AuthenticationFailed("SASL exchange did not finish")
            token = mechanism.auth_bytes()
            response = await self._send(
                SaslAuthenticateRequest(auth_bytes=token, version=version), version, timeout
            )
            if response.error_code != 0:
                # Never include credentials; the broker's message names only the principal.
                raise AuthenticationFailed(
                    f"SASL {sasl.mechanism} with {self.host}:{self.port}: "
                    f"{error_name(response.error_code)} {response.error_message or ''}".rstrip()
                    + _SASL_FAILURE_HINTS.get(sasl.mechanism, "")
                )
            try:
                mechanism.receive(bytes(response.auth_bytes))
            except (ValueError, KeyError) as exc:
                raise AuthenticationFailed(f"SASL {sasl.mechanism}: {exc}") from exc
        if not mechanism.is_authenticated():
            raise AuthenticationFailed(f"SASL {sasl.mechanism}: not authenticated")
        lifetime_ms = getattr(response, "session_lifetime_ms", 0) or 0  # v1+
        self.session_lifetime_ms = lifetime_ms
        if lifetime_ms > 0:
            # KIP-368: a client re-authenticates between 85 % and 95 % of the session's
            # lifetime; here a new connection takes over then (ConnectionPool.get), with
            # whatever credential the login holds at that time (a renewed token).
            self.reauthenticate_at = time.monotonic() + lifetime_ms / 1000 * (
                REAUTHENTICATE_FACTOR + REAUTHENTICATE_JITTER * random.random())

    def version_for(self, request_class: Any, max_version: int | None = None) -> int:
        """Best version both this client and the broker support (capped by `max_version`)."""
        api_key = request_class.API_KEY
        broker_range = self.api_versions.get(api_key)
        if broker_range is None:
            raise UnsupportedApi(f"{request_class.__name__} not offered by broker")
        version: int = min(request_class.max_version, broker_range[1])
        if max_version is not None:
            version = min(version, max_version)
        if version < broker_range[0]:
            raise UnsupportedApi(
                f"{request_class.__name__}: broker supports {broker_range}, client up to {version}"
            )
        return version

    async def request(
        self, request: Any, timeout_seconds: float, decode: Decoder | None = None
    ) -> Any:
        """Send `request` (its version already set, see `version_for`) and await the answer,
        decoded by `decode(payload, version)` if given (else `fastdecode.decode_response`)."""
        version = request.API_VERSION
        if version is None:
            version = self.version_for(type(request))
        return await self._send(request, version, timeout_seconds, decode)

    async def _send(
        self, request: Any, version: int, timeout_seconds: float, decode: Decoder | None = None
    ) -> Any:
        if self._closed_error is not None:
            raise self._closed_error
        writer = self._writer
        if writer is None:
            raise BrokerUnreachable("not connected")
        self._next_correlation_id = (self._next_correlation_id + 1) % 2**31
        correlation_id = self._next_correlation_id
        try:
            if isinstance(request, LeanRequest):
                data = request.frame(correlation_id, self._options.client_id)
                response_class = request.response_class
            else:
                request.API_VERSION = version
                request.with_header(
                    correlation_id=correlation_id, client_id=self._options.client_id
                )
                data = request.encode(header=True, framed=True)
                response_class = request.header.get_response_class()
        except Exception as exc:
            raise DecodeError(f"cannot encode {request.name} v{version}: {exc}") from exc
        if decode is None:
            decode = functools.partial(decode_response, response_class)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (decode, version, future)
        try:
            writer.write(data)
            return await asyncio.wait_for(future, timeout_seconds)
        except TimeoutError as exc:
            raise RequestTimeout(
                f"{request.name} v{version} to {self.host}:{self.port} timed out"
                f" after {timeout_seconds:g} s"
            ) from exc
        finally:
            self._pending.pop(correlation_id, None)

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        error: CollectError
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                # Checked before reading the frame: nothing of an oversized one is buffered.
                if size < 4:
                    error = DecodeError(f"invalid frame size {size}")
                    break
                if size > self._options.max_response_bytes:
                    if self._options.ssl_context is None and _is_tls_record_header(size):
                        error = TlsFailed(
                            f"{self.host}:{self.port} answered with a TLS record: its listener "
                            "expects TLS (SSL or SASL_SSL), configure a `tls` section"
                        )
                        break
                    error = ResponseTooLarge(
                        f"response frame of {size} bytes from {self.host}:{self.port} exceeds "
                        f"max_response_bytes ({self._options.max_response_bytes})"
                    )
                    break
                payload = await reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(payload, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # the request timed out already
                decode, version, future = entry
                if future.done():
                    continue
                try:
                    response = decode(payload, version)
                except Exception as exc:
                    future.set_exception(
                        DecodeError(f"cannot decode {_name(decode)} v{version}: {exc}")
                    )
                else:
                    future.set_result(response)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            if isinstance(exc, ssl.SSLError) and "ALERT" in str(exc.reason or ""):
                # TLS 1.3: a broker refusing the client certificate sends its alert after the
                # client's handshake finished, so the first read fails.
                error = TlsFailed(f"TLS with {self.host}:{self.port}: {exc}")
            else:
                error = BrokerUnreachable(
                    f"connection to {self.host}:{self.port} lost: {exc!r}"
                )
        except asyncio.CancelledError:
            error = BrokerUnreachable("connection closed")
            self._fail(error)
            raise
        self._fail(error)

    def _fail(self, error: CollectError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        pending, self._pending = self._pending, {}
        for _, _, future in pending.values():
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        self._fail(BrokerUnreachable("connection closed"))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        writer = self._writer
        if writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)


def _is_tls_record_header(size: int) -> bool:
    """The 4 bytes read as a frame size are a TLS record's start: content type alert (21) or
    handshake (22), then major version 3 (RFC 8446 5.1): a TLS listener answering plaintext."""
    return (size >> 24) in (21, 22) and (size >> 16) & 0xFF == 3


def _name(decode: Decoder) -> str:
    """The response class name of a default decoder, for error messages."""
    if isinstance(decode, functools.partial) and decode.args:
        return str(getattr(decode.args[0], "__name__", decode.args[0]))
    return getattr(decode, "__qualname__", "response")


class ConnectionPool:
    """Connections by broker id (or bootstrap address), opened lazily and reused across polls."""

    def __init__(self, options: ConnectionOptions) -> None:
        self._options = options
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._retiring: dict[asyncio.Task[None], BrokerConnection] = {}

    async def get(self, host: str, port: int) -> BrokerConnection:
        key = (host, port)
        connection = self._connections.get(key)
        if connection is not None and connection.is_open:
            return connection
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            connection = self._connections.get(key)
            if connection is not None and connection.is_open:
                return connection
            if connection is not None:
                await self._retire(connection)
            connection = BrokerConnection(host, port, self._options)
            await connection.connect()
            self._connections[key] = connection
            return connection

    async def connect_apart(self, host: str, port: int) -> BrokerConnection:
        """A new connection to (host, port) that the pool does not keep (the caller closes
        it): a request whose answer may cost its connection costs only this one."""
        connection = BrokerConnection(host, port, self._options)
        try:
            await connection.connect()
        except BaseException:
            await connection.close()
            raise
        return connection

    @property
    def holds_connections(self) -> bool:
        """Whether any connection (open or failed, not yet closed) is kept."""
        return bool(self._connections or self._retiring)

    async def _retire(self, connection: BrokerConnection) -> None:
        """Close a replaced connection; one replaced while answers are due (its session is
        ending) is closed once they are in, so that no request fails for the replacement."""
        if connection.is_idle:
            await connection.close()
            return

        async def close_when_idle() -> None:
            deadline = time.monotonic() + self._options.connect_timeout_seconds
            while not connection.is_idle and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await connection.close()

        task = asyncio.get_running_loop().create_task(close_when_idle())
        self._retiring[task] = connection
        task.add_done_callback(lambda done: self._retiring.pop(done, None))

    def lost_connection(self, host: str, port: int) -> bool:
        """Whether the kept connection to (host, port) was lost since it was opened."""
        connection = self._connections.get((host, port))
        return connection is not None and connection.lost

    def session_ended(self, host: str, port: int) -> bool:
        """Whether the kept connection to (host, port) must log in again (its SASL session
        lifetime is over)."""
        connection = self._connections.get((host, port))
        return connection is not None and connection.session_ended

    def open_connection(self, host: str, port: int) -> BrokerConnection | None:
        """The open connection to (host, port), if any; never connects."""
        connection = self._connections.get((host, port))
        return connection if connection is not None and connection.is_open else None

    async def discard(self, host: str, port: int) -> None:
        connection = self._connections.pop((host, port), None)
        if connection is not None:
            await connection.close()

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()
        retiring, self._retiring = self._retiring, {}
        for task, connection in retiring.items():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await connection.close()


def parse_bootstrap(server: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); Kafka's default port 9092 when omitted."""
    server = server.strip()
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        port = rest.lstrip(":")
        return host, int(port) if port else 9092
    host, sep, port = server.rpartition(":")
    if not sep:
        return server, 9092
    return host, int(port)
