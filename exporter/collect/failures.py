"""The typed failures of the collect layer: every one a `CollectError` whose `kind` is a stable
label value. Here, not in `connection`, so that a SASL login (exporter/collect/sasl/) can raise
them without importing the connection that imports it."""

from __future__ import annotations


class CollectError(Exception):
    """Base of every failure the collect layer reports; `kind` is a stable label value."""

    kind = "ERROR"


class BrokerUnreachable(CollectError):
    kind = "BROKER_UNREACHABLE"


class RequestTimeout(CollectError):
    kind = "REQUEST_TIMEOUT"


class DecodeError(CollectError):
    kind = "DECODE_ERROR"


class ResponseTooLarge(DecodeError):
    """A response frame above `max_response_bytes` (the connection is closed: its bytes are
    not read). Kind DECODE_ERROR as before; the type lets DescribeProducers ask smaller
    batches next time."""


class AuthenticationFailed(CollectError):
    kind = "AUTHENTICATION_FAILED"


class TlsFailed(AuthenticationFailed):
    """The TLS handshake failed: certificate not trusted, hostname not in it, refused. Counted as
    AUTHENTICATION_FAILED, as Kafka's Java client counts its SslAuthenticationException (a
    subclass of AuthenticationException); `scan` tells the two apart."""


class TlsConnectionClosed(BrokerUnreachable):
    """The broker closed the connection during the TLS handshake (a listener that does not
    speak TLS does so). Counted as BROKER_UNREACHABLE; `scan` reports it as a TLS failure."""


class ConnectTimeout(BrokerUnreachable):
    """The TCP (or TLS) connect did not finish in time: counted as BROKER_UNREACHABLE; `scan`
    reports it as a timeout."""


class UnsupportedApi(CollectError):
    """The broker does not offer this API in any version this client can speak."""

    kind = "UNSUPPORTED_VERSION"
