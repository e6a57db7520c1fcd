"""Read a small YAML file for configuration, refusing what would hang, explode or mislead.

PyYAML's `safe_load` alone accepts duplicate keys (a second `clusters:` silently replaces the
first), recurses once per nesting level (50,000 levels end in RecursionError), and expands
aliases into shared objects that any walk over them multiplies (an "alias bomb"). This loader
rejects each with a ConfigError naming the file and line; it also refuses files that are not
UTF-8 text without echoing any of their bytes.
"""

from __future__ import annotations

import gc
import os
import stat
import threading
from typing import Any

import yaml

from exporter.errors import ConfigError

MAX_FILE_BYTES = 4 * 1024 * 1024
"""Configuration files are a few kilobytes; more is a mistake (or /dev/zero)."""
MAX_DEPTH = 64
"""Nesting levels; the exporter's own schema needs 5."""
MAX_EXPANDED_NODES = 100_000
"""Values that aliases may add when expanded (beyond the file's own nodes, which the size cap
bounds): anchors stay usable, bombs do not."""
READ_DEADLINE_SECONDS = 2.0
"""A configuration file is read in milliseconds; longer is a hung mount or device."""


def read_text_file(
    path: str, what: str, *, max_bytes: int = MAX_FILE_BYTES, allow_pipe: bool = False
) -> str:
    """The file as UTF-8 text; errors name `what` and the path, never a byte of the content.

    Only a regular file (a FIFO, a terminal or a device such as /dev/zero is refused before a
    byte is read: opening never waits for a writer), read within READ_DEADLINE_SECONDS (a hung
    network mount fails the read instead of hanging the command or the SIGHUP reload).
    `allow_pipe`: a FIFO or pipe (e.g. /dev/stdin fed by `cat`) is read too, within the same
    deadline and size."""
    outcome: list[bytes | BaseException] = []

    def read() -> None:
        try:
            outcome.append(_read_regular(path, what, max_bytes, allow_pipe))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    reader = threading.Thread(target=read, name="config-file-read", daemon=True)
    reader.start()
    reader.join(READ_DEADLINE_SECONDS)
    if not outcome:
        raise ConfigError(
            f"{what}: reading {path!r} did not finish within {READ_DEADLINE_SECONDS:g} s"
        )
    data = outcome[0]
    if isinstance(data, BaseException):
        raise data
    if len(data) > max_bytes:
        raise ConfigError(f"{what}: {path!r} is larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # The position and the byte could belong to a secret: say neither.
        raise ConfigError(f"{what}: {path!r} is not UTF-8 text") from None


def _read_regular(path: str, what: str, max_bytes: int, allow_pipe: bool = False) -> bytes:
    try:
        # Non-blocking open: a FIFO without a writer is refused at once, not waited on; where
        # a pipe is allowed, the open waits for its writer (within the caller's deadline).
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (0 if allow_pipe else os.O_NONBLOCK))
    except FileNotFoundError:
        raise ConfigError(f"{what}: not found: {path!r}") from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode) and not (allow_pipe and stat.S_ISFIFO(mode)):
            kind = "a directory" if stat.S_ISDIR(mode) else (
                "a FIFO (pipe)" if stat.S_ISFIFO(mode) else "not a regular file")
            raise ConfigError(f"{what}: {path!r} is {kind}; give a regular file")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


MAX_PASSWORD_FILE_BYTES = 4096


def read_password_file(path: str, where: str) -> str:
    """A passphrase file: UTF-8, one line (a trailing newline is dropped), not empty."""
    text = read_text_file(path, where, max_bytes=MAX_PASSWORD_FILE_BYTES)
    text = text.rstrip("\r\n")
    if not text:
        raise ConfigError(f"{where}: {path!r} is empty")
    return text


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it (every PyYAML wheel does): the pure-Python scanner
takes about a millisecond per cluster, so a 4 MiB file took a minute and hundreds of MB."""


class _Frame:
    """An open mapping or sequence of the event stream."""

    __slots__ = ("anchor", "at_key", "is_mapping", "keys", "mark", "size")

    def __init__(self, anchor: str | None, is_mapping: bool, mark: Any) -> None:
        self.anchor = anchor
        self.is_mapping = is_mapping
        self.keys: set[tuple[str, str]] = set()
        self.mark = mark
        self.size = 1
        """Values in this collection with every alias expanded (itself included)."""
        self.at_key = True
        """In a mapping: the next node is a key."""


def _fail(what: str, message: str, mark: Any) -> ConfigError:
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return ConfigError(f"{what}: {message}{where}")


def _check_events(loader: Any, what: str) -> None:
    """One pass over the parser's events, before any node is built: nesting depth, duplicate
    keys and the values aliases would add when expanded (an anchor counts once per use).

    Linear in the file, without recursion: the composer that runs afterwards recurses once per
    level, which MAX_DEPTH now bounds.
    """
    stack: list[_Frame] = []
    sizes: dict[str, int] = {}
    own_nodes = 0
    while loader.check_event():
        event = loader.get_event()
        if isinstance(event, yaml.DocumentStartEvent):
            sizes.clear()
            own_nodes = 0
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            frame = stack.pop()
            # Without aliases every value is counted once: size <= the file's own values.
            if frame.size - own_nodes > MAX_EXPANDED_NODES:
                raise _fail(what, f"expands to more than {MAX_EXPANDED_NODES} values beyond "
                            "the file's own nodes (aliases multiply their anchors)", frame.mark)
            if frame.anchor is not None:
                sizes[frame.anchor] = frame.size
            _add_child(stack, frame.size)
            continue
        if not isinstance(event, yaml.NodeEvent):
            continue
        if len(stack) + 1 > MAX_DEPTH:
            raise _fail(what, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        parent = stack[-1] if stack else None
        if parent is not None and parent.is_mapping and parent.at_key and isinstance(
            event, yaml.ScalarEvent
        ):
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            if tag != "tag:yaml.org,2002:merge":
                if (tag, event.value) in parent.keys:
                    raise _fail(what, f"duplicate key {_short(event.value)}", event.start_mark)
                parent.keys.add((tag, event.value))
        if isinstance(event, yaml.AliasEvent):
            if any(frame.anchor == event.anchor for frame in stack):
                raise _fail(what, "an alias refers to its own anchor", event.start_mark)
            # An unknown anchor is the composer's error, reported after this pass.
            _add_child(stack, sizes.get(event.anchor or "", 1))
            continue
        own_nodes += 1
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append(_Frame(event.anchor, isinstance(event, yaml.MappingStartEvent),
                                event.start_mark))
            continue
        if event.anchor is not None:
            sizes[event.anchor] = 1
        _add_child(stack, 1)


def _add_child(stack: list[_Frame], size: int) -> None:
    if stack:
        parent = stack[-1]
        parent.size += size
        parent.at_key = not parent.at_key


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def load_yaml_text(text: str, what: str) -> Any:
    """Parse YAML text with the limits above; ConfigError names `what` and the line.

    Two passes over the text: the limits are checked on the parser's events, then PyYAML
    builds the data (its own nodes are never walked again). The garbage collector is paused
    meanwhile: the hundreds of thousands of objects a large file makes would otherwise be
    scanned over and over as they are created.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        checker = _LOADER(text)
        try:
            _check_events(checker, what)
        finally:
            checker.dispose()
        loader = _LOADER(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.reader.ReaderError as exc:
        # A control character (\x00, \x01, ...): say where and which, never the text around.
        raise ConfigError(
            f"{what}: invalid YAML (line {_line_of(text, exc)}): control character "
            f"U+{exc.character:04X} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        if problem == "exceeded maximum nesting depth":
            # libyaml's own limit (1,000 levels), met while it reads ahead of the events.
            raise ConfigError(f"{what}: nested deeper than {MAX_DEPTH} levels{where}") from None
        raise ConfigError(f"{what}: invalid YAML{where}: {problem}") from None
    finally:
        if collecting:
            gc.enable()


def _line_of(text: str, exc: yaml.reader.ReaderError) -> int:
    """The line of a reader error: libyaml gives a byte offset in the UTF-8 text, PyYAML's own
    reader an index in the string (a newline is one of either)."""
    position = max(0, exc.position)
    if _LOADER is yaml.SafeLoader:
        return text.count("\n", 0, position) + 1
    return text.encode("utf-8").count(b"\n", 0, position) + 1


def read_yaml_file(path: str, what: str, *, allow_pipe: bool = False) -> Any:
    return load_yaml_text(read_text_file(path, what, allow_pipe=allow_pipe), what)
