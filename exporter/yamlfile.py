"""Read a small YAML file for configuration, refusing what would hang, explode or mislead.

PyYAML's `safe_load` alone accepts duplicate keys (a second `clusters:` silently replaces the
first), recurses once per nesting level (50,000 levels end in RecursionError), and expands
aliases into shared objects that any walk over them multiplies (an "alias bomb"). This loader
rejects each with a ConfigError naming the file and line; it also refuses files that are not
UTF-8 text without echoing any of their bytes.
"""

from __future__ import annotations

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


class _Loader(yaml.SafeLoader):
    """SafeLoader with a nesting limit, an expansion limit and duplicate-key errors."""

    def __init__(self, stream: str, what: str) -> None:
        super().__init__(stream)
        self._what = what
        self._depth = 0

    def _fail(self, message: str, mark: Any) -> ConfigError:
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return ConfigError(f"{self._what}: {message}{where}")

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise self._fail(f"nested deeper than {MAX_DEPTH} levels",
                                 self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_expansion(node, self)
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key_node, _value in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == (
                    "tag:yaml.org,2002:merge"
                ):
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise self._fail(f"duplicate key {_short(key_node.value)}",
                                     key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _check_expansion(root: Any, loader: _Loader) -> None:
    """Count nodes as if every alias were copied (an anchor counts once per use)."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children: list[Any] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if not children_done:
            if key in sizes:
                continue
            if key in visiting:
                raise loader._fail("an alias refers to its own anchor", node.start_mark)
            visiting.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children)
            continue
        visiting.discard(key)
        total = 1 + sum(sizes[id(child)] for child in children)
        # Without aliases every node is counted once: total <= distinct nodes seen so far.
        if total - (len(sizes) + 1) > MAX_EXPANDED_NODES:
            raise loader._fail(
                f"expands to more than {MAX_EXPANDED_NODES} values beyond the file's own "
                "nodes (aliases multiply their anchors)", node.start_mark,
            )
        sizes[key] = total


def load_yaml_text(text: str, what: str) -> Any:
    """Parse YAML text with the limits above; ConfigError names `what` and the line."""
    try:
        loader = _Loader(text, what)
    except yaml.reader.ReaderError as exc:
        # A control character (\x00, \x01, ...): say where and which, never the text around.
        line = text.count("\n", 0, max(0, exc.position)) + 1
        raise ConfigError(
            f"{what}: invalid YAML (line {line}): control character U+{exc.character:04X} "
            "is not allowed"
        ) from None
    try:
        return loader.get_single_data()
    except yaml.reader.ReaderError as exc:
        raise ConfigError(
            f"{what}: invalid YAML: control character U+{exc.character:04X} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{what}: invalid YAML{where}: {problem}") from None
    finally:
        loader.dispose()


def read_yaml_file(path: str, what: str, *, allow_pipe: bool = False) -> Any:
    return load_yaml_text(read_text_file(path, what, allow_pipe=allow_pipe), what)
