"""Structured logging, configured once at the process edge (the CLI).

JSON lines by default so log pipelines can parse them; a readable console renderer when stderr
is a terminal (`log_format: auto`). Library logs (kafka-python, APScheduler) go through the
same renderer. A redaction processor blanks any value whose key looks like a secret, so a
careless `log.info(..., sasl_password=...)` cannot leak one.

Logging never changes a metric or stops the daemon: a line that cannot be written (stderr
closed, a full disk, a broken pipe) is dropped and counted (`dropped_log_messages`, exposed as
`kafka_txn_exporter_log_messages_dropped_total`), never raised into the caller.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

REDACTED = "[REDACTED]"
_SECRET_KEY_RE = re.compile(r"password|passwd|secret|token|credential|api_key", re.IGNORECASE)
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


_dropped_lock = threading.Lock()
_dropped = 0


def count_dropped_log_message() -> None:
    global _dropped
    with _dropped_lock:
        _dropped += 1


def dropped_log_messages() -> int:
    """Log lines dropped because the stream refused them, since the process started."""
    return _dropped


class _DroppingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler whose failed writes are counted, not reported on the same stream."""

    def handleError(self, record: logging.LogRecord) -> None:
        count_dropped_log_message()


def _redact_value(key: str, value: Any) -> Any:
    if _SECRET_KEY_RE.search(key):
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): _redact_value(str(k), v) for k, v in value.items()}
    return value


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Replace values of keys named like password/secret/token (also in nested dicts)."""
    for key in list(event_dict):
        if key == "event":
            continue
        event_dict[key] = _redact_value(key, event_dict[key])
    return event_dict


def resolve_format(log_format: str, stream: TextIO) -> str:
    """`auto` means console on a TTY, JSON otherwise."""
    if log_format != "auto":
        return log_format
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def configure_logging(
    log_format: str = "auto", log_level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog and the stdlib root logger to render through one pipeline."""
    stream = sys.stderr if stream is None else stream
    level = _LEVELS[log_level.lower()]
    fmt = resolve_format(log_format, stream)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    renderer: Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        renderer = structlog.processors.JSONRenderer()

    handler = _DroppingHandler(stream)
    writer = _LineWriter(handler)
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info if fmt == "json" else _passthrough,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *_args: writer,
        cache_logger_on_first_use=False,
    )

    # Library loggers (kafka-python is chatty at INFO: keep it at WARNING unless debugging).
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if fmt == "json" else _passthrough,
            renderer,
        ],
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))


class _LineWriter:
    """structlog's output, written under the stdlib handler's lock.

    Our events and library records go to the same stream from several threads; with two
    locks (structlog's PrintLogger has its own) two JSON lines could merge into one.
    """

    def __init__(self, handler: _DroppingHandler) -> None:
        self._handler = handler

    def msg(self, message: str) -> None:
        self._handler.acquire()
        try:
            self._handler.stream.write(message + "\n")
            self._handler.stream.flush()
        except Exception:  # OSError, ValueError (closed file), anything a stream may raise
            count_dropped_log_message()
        finally:
            self._handler.release()

    log = debug = info = warning = warn = error = err = critical = fatal = exception = msg


def _passthrough(
    _logger: WrappedLogger, _method: str, event_dict: MutableMapping[str, Any]
) -> EventDict:
    return event_dict


def get_logger(name: str | None = None) -> Any:
    """A structlog logger; `Any` because structlog's BoundLogger protocol is loose."""
    return structlog.get_logger(name) if name else structlog.get_logger()
