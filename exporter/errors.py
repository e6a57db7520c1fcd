"""The configuration error every layer may raise (config, web config, TLS files, HTTP server).

It lives here, below all of them, so the pure config layer and the HTTP layer both use it
without importing each other. The CLI turns it into exit status 2 and one line on stderr.
"""

from __future__ import annotations

import reprlib
import sys

EXIT_CONFIG_ERROR = 2
EXIT_INTERRUPTED = 130
"""Ctrl-C: 128 + SIGINT, as a shell reports a process the signal ended."""


class ConfigError(Exception):
    """A configuration problem; the message starts with the field path that is wrong."""


_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = 80
_REPR.maxother = 80
for _name in ("maxdict", "maxlist", "maxtuple", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_REPR, _name, 4)


def bounded_repr(value: object) -> str:
    """`repr`, cut short for large or deeply nested values (see `describe`)."""
    return _REPR.repr(value)


def describe(value: object) -> str:
    """A bounded description of a bad value for an error message.

    reprlib stops after a few elements and levels, so a value built by a YAML alias bomb
    (10^9 elements sharing a few objects) costs a few hundred bytes, not gigabytes.
    """
    text = _REPR.repr(value)
    return text if isinstance(value, str) else f"{type(value).__name__} {text}"


def say(message: str, prog: str = "kafka-txn-exporter") -> None:
    """One line on stderr; an unwritable stderr must not turn exit 2 into a traceback's 1."""
    try:
        sys.stderr.write(f"{prog}: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
