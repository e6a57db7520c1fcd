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
from collections.abc import Callable, Mapping, MutableMapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
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


# structlog (with the asyncio, tracebacks and stdlib modules it loads) is imported when the
# first line is logged, not at start-up: a `scan` that logs nothing does not pay for it.
# `configure_logging` records what to configure; the first logger used applies it.
_pending_lock = threading.Lock()
_pending: Callable[[ModuleType], None] | None = None
_min_level = logging.NOTSET
"""The configured level: below it a call is dropped without loading structlog."""


def _structlog() -> ModuleType:
    """structlog, configured as `configure_logging` last asked."""
    global _pending
    import structlog

    if _pending is not None:
        with _pending_lock:
            if _pending is not None:
                _pending(structlog)
                _pending = None
    return structlog


def _shared_processors(structlog: ModuleType) -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]


def _renderer(structlog: ModuleType, fmt: str) -> Processor:
    if fmt == "console":
        renderer: Processor = structlog.dev.ConsoleRenderer(colors=False)
        return renderer
    renderer = structlog.processors.JSONRenderer()
    return renderer


class _LibraryFormatter(logging.Formatter):
    """Library records (kafka-python's, APScheduler's) through structlog's renderer; made on
    the first record, under the handler's lock."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self._fmt_name = fmt
        self._formatter: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._formatter is None:
            structlog = _structlog()
            self._formatter = structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=[structlog.stdlib.add_logger_name,
                                   *_shared_processors(structlog)],
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info if self._fmt_name == "json"
                    else _passthrough,
                    _renderer(structlog, self._fmt_name),
                ],
            )
        return self._formatter.format(record)


def configure_logging(
    log_format: str = "auto", log_level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog and the stdlib root logger to render through one pipeline."""
    global _pending, _min_level
    stream = sys.stderr if stream is None else stream
    level = _LEVELS[log_level.lower()]
    fmt = resolve_format(log_format, stream)
    handler = _DroppingHandler(stream)
    writer = _LineWriter(handler)

    def configure(structlog: ModuleType) -> None:
        structlog.configure(
            processors=[
                *_shared_processors(structlog),
                structlog.processors.StackInfoRenderer(),
                structlog.processors.format_exc_info if fmt == "json" else _passthrough,
                _renderer(structlog, fmt),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=lambda *_args: writer,
            cache_logger_on_first_use=False,
        )

    with _pending_lock:
        _pending = configure
    _min_level = level
    if "structlog" in sys.modules:  # loggers made by structlog itself must see it now
        _structlog()

    # Library loggers (kafka-python is chatty at INFO: keep it at WARNING unless debugging).
    handler.setFormatter(_LibraryFormatter(fmt))
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


def _drop(*_args: Any, **_kwargs: Any) -> None:
    return None


class _Logger:
    """structlog's logger, looked up (and structlog imported) when first used."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if _LEVELS.get(attr, logging.CRITICAL) < _min_level:
            return _drop  # as structlog's filtering logger would, without loading it
        logger = self._logger
        if logger is None:
            structlog = _structlog()
            logger = structlog.get_logger(self._name) if self._name else structlog.get_logger()
            self._logger = logger
        return getattr(logger, attr)


def get_logger(name: str | None = None) -> Any:
    """A structlog logger; `Any` because structlog's BoundLogger protocol is loose."""
    return _Logger(name)
