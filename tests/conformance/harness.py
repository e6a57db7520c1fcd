"""Loading the real-broker captures and comparing a simulator answer with them, field by field.

The captures (tests/data/real-kafka-4.0 and tests/data/real-kafka-4.0-groups, README in each)
are decoded with kafka-python; the simulator's answer is decoded the same way and both are
turned into plain JSON-like values (`to_plain`). `compare()` walks both trees and reports every
differing leaf by path (``topics[0].partitions[1].last_timestamp``). A value may differ from the
capture only where a `Rule` for its path says so, and then only if the rule's relation holds.
The rules in use are listed (NORMALISATIONS in rules.py, GROUP_NORMALISATIONS in
test_conformance_groups_4_0.py) so the allowed differences are explicit.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.record.util import calc_crc32c

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "real-kafka-4.0"
GROUPS_DATA_DIR = DATA_DIR.parent / "real-kafka-4.0-groups"


@dataclass(frozen=True)
class Capture:
    """One exchange file of the real Kafka 4.0 capture."""

    file: str
    data: Mapping[str, Any]

    @property
    def api_key(self) -> int | None:
        v = self.data.get("api_key")
        return None if v is None else int(v)

    @property
    def request_version(self) -> int:
        return int(self.data["request_version"])

    @property
    def is_exchange(self) -> bool:
        """A wire exchange (not a CLI/JMX record)."""
        return "request_hex" in self.data

    @property
    def request_bytes(self) -> bytes:
        return bytes.fromhex(self.data["request_hex"])

    @property
    def response_bytes(self) -> bytes | None:
        h = self.data.get("response_hex")
        return None if h is None else bytes.fromhex(h)

    @property
    def correlation_id(self) -> int:
        header = self.data.get("request_header")
        if header is not None:
            return int(header["correlation_id"])
        # Files without a decoded header: api_key, api_version, then correlation_id (int32).
        return int(struct.unpack_from(">i", self.request_bytes, 4)[0])

    @property
    def response_version(self) -> int:
        """Version the response body decodes with (41: a v0 body for an unsupported version)."""
        return int(self.data.get("response_decoded_as_version", self.request_version))

    @property
    def connection_closed(self) -> bool:
        return bool(self.data.get("connection_closed", False))


def load_captures(data_dir: Path = DATA_DIR) -> dict[str, Capture]:
    out: dict[str, Capture] = {}
    for path in sorted(data_dir.glob("*.json")):
        out[path.name] = Capture(path.name, json.loads(path.read_text()))
    return out


def exchange_files(data_dir: Path = DATA_DIR) -> list[str]:
    return [name for name, cap in load_captures(data_dir).items() if cap.is_exchange]


# ---------------------------------------------------------------------------------------------
# Plain values


_BITFIELDS = frozenset({"authorized_operations", "cluster_authorized_operations"})


def _bitfield(bits: set[int] | frozenset[int] | None) -> int:
    """kafka-python decodes a bitfield as a set of bit numbers ({31} -> None); the capture
    files keep the raw signed int32 (-2147483648 = not requested)."""
    raw = sum(1 << b for b in (bits if bits is not None else {31}))
    return raw - (1 << 32) if raw >= 1 << 31 else raw


def to_plain(value: Any) -> Any:
    """A decoded kafka-python message -> the JSON-like form used in the capture files
    (bytes as lowercase hex, UUIDs as strings, the all-zero UUID as None as kafka-python does,
    bitfields as signed int32)."""
    if hasattr(value, "to_dict") and hasattr(value, "_struct"):
        value = value.to_dict(json=False)
    if isinstance(value, dict):
        return {k: _bitfield(v) if k in _BITFIELDS else to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


# ---------------------------------------------------------------------------------------------
# Record batches v2, decoded into the layout of the capture's `decoded_record_batches`

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


def decode_record_batches(data: bytes) -> list[dict[str, Any]]:
    """Uncompressed record batches v2 -> header fields and records (crc_valid added)."""
    batches: list[dict[str, Any]] = []
    pos = 0
    while pos + 12 <= len(data):
        (base_offset, batch_length) = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + batch_length
        if end > len(data):
            break  # a partial batch at the end of a fetch
        (
            _bo,
            _bl,
            leader_epoch,
            magic,
            crc,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _BATCH_HEADER.unpack_from(data, pos)
        is_control = bool(attributes & 0x20)
        batch: dict[str, Any] = {
            "base_offset": base_offset,
            "batch_length": batch_length,
            "partition_leader_epoch": leader_epoch,
            "magic": magic,
            "crc": crc,
            "attributes": attributes,
            "compression": attributes & 0x07,
            "timestamp_type": "LogAppendTime" if attributes & 0x08 else "CreateTime",
            "is_transactional": bool(attributes & 0x10),
            "is_control": is_control,
            "has_delete_horizon": bool(attributes & 0x40),
            "last_offset_delta": last_offset_delta,
            "last_offset": base_offset + last_offset_delta,
            "base_timestamp": base_ts,
            "max_timestamp": max_ts,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": base_sequence,
            "records_count": count,
        }
        crc_start = pos + 21  # after base offset, length, leader epoch, magic, crc
        batch_crc_valid = calc_crc32c(memoryview(data)[crc_start:end]) == crc
        rpos = pos + _BATCH_HEADER.size
        records: list[dict[str, Any]] = []
        for _ in range(count):
            length, rpos = _varint(data, rpos)
            rend = rpos + length
            rpos += 1  # record attributes
            ts_delta, rpos = _varint(data, rpos)
            off_delta, rpos = _varint(data, rpos)
            klen, rpos = _varint(data, rpos)
            key = None if klen < 0 else data[rpos : rpos + klen]
            rpos += max(klen, 0)
            vlen, rpos = _varint(data, rpos)
            value = None if vlen < 0 else data[rpos : rpos + vlen]
            rpos += max(vlen, 0)
            nheaders, rpos = _varint(data, rpos)
            headers: list[list[str | None]] = []
            for _h in range(nheaders):
                hk, rpos = _varint(data, rpos)
                hkey = data[rpos : rpos + hk].decode()
                rpos += hk
                hv, rpos = _varint(data, rpos)
                hval = None if hv < 0 else data[rpos : rpos + hv].hex()
                rpos += max(hv, 0)
                headers.append([hkey, hval])
            rec: dict[str, Any] = {
                "offset": base_offset + off_delta,
                "timestamp": base_ts + ts_delta,
                "key_hex": None if key is None else key.hex(),
                "value_hex": None if value is None else value.hex(),
                "headers": headers,
            }
            if is_control and key is not None and value is not None and len(key) >= 4:
                version, ctype = struct.unpack(">hh", key[:4])
                value_version, coordinator_epoch = struct.unpack(">hi", value[:6])
                rec["control"] = {
                    "version": version,
                    "type": _CONTROL_TYPES.get(ctype, str(ctype)),
                    "value_version": value_version,
                    "coordinator_epoch": coordinator_epoch,
                }
            else:
                for name, raw in (("key_utf8", key), ("value_utf8", value)):
                    if raw is not None:
                        with contextlib.suppress(UnicodeDecodeError):
                            rec[name] = raw.decode()
            records.append(rec)
            rpos = rend
        batch["records"] = records
        batch["_crc_valid"] = batch_crc_valid
        batches.append(batch)
        pos = end
    return batches


# ---------------------------------------------------------------------------------------------
# Comparison

Checker = Callable[[Any, Any], str | None]
"""(expected from the capture, actual from the simulator) -> None when the relation holds,
else a short explanation."""


@dataclass(frozen=True)
class Rule:
    """A listed normalisation: at paths matching `pattern` (`*` any text, `[*]` any index),
    the values may differ provided `check` holds."""

    pattern: str
    name: str
    check: Checker


@dataclass
class Mismatch:
    path: str
    expected: Any
    actual: Any
    note: str = ""

    def __str__(self) -> str:
        note = f"  ({self.note})" if self.note else ""
        return f"{self.path}: expected {_clip(self.expected)}, actual {_clip(self.actual)}{note}"


def _clip(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


@dataclass
class Comparison:
    mismatches: list[Mismatch] = field(default_factory=list)
    normalised: list[str] = field(default_factory=list)
    """Paths where a rule accepted a differing value (so byte equality cannot be expected)."""

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def report(self) -> str:
        lines = [str(m) for m in self.mismatches]
        return "\n".join(lines)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Rule patterns: `*` = any text, `[*]` = any list index; everything else literal."""
    parts = pattern.split("[*]")
    body = r"\[\d+\]".join(re.escape(p).replace(r"\*", ".*") for p in parts)
    return re.compile(body + r"\Z")


def _rule_for(path: str, rules: list[Rule]) -> Rule | None:
    for rule in rules:
        if _pattern_regex(rule.pattern).match(path):
            return rule
    return None


def _join(path: str, key: str) -> str:
    return key if not path else f"{path}.{key}"


def compare(expected: Any, actual: Any, rules: list[Rule], path: str = "") -> Comparison:
    """Field-by-field comparison of two plain trees under the given rules."""
    result = Comparison()
    _compare(expected, actual, rules, path, result)
    return result


def _compare(expected: Any, actual: Any, rules: list[Rule], path: str, out: Comparison) -> None:
    rule = _rule_for(path, rules) if path else None
    if rule is not None:
        if expected == actual:
            return
        problem = rule.check(expected, actual)
        if problem is None:
            out.normalised.append(f"{path} [{rule.name}]")
        else:
            out.mismatches.append(Mismatch(path, expected, actual, f"{rule.name}: {problem}"))
        return
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected:
            if key.startswith("_"):
                continue
            if key not in actual:
                out.mismatches.append(Mismatch(_join(path, key), expected[key], "<missing>"))
                continue
            _compare(expected[key], actual[key], rules, _join(path, key), out)
        for key in actual:
            if key not in expected and not key.startswith("_"):
                out.mismatches.append(Mismatch(_join(path, key), "<absent>", actual[key]))
        return
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            out.mismatches.append(
                Mismatch(
                    path + ".length",
                    len(expected),
                    len(actual),
                    f"expected {_short(expected)}, actual {_short(actual)}",
                )
            )
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            _compare(e, a, rules, f"{path}[{i}]", out)
        return
    if type(expected) is not type(actual) or expected != actual:
        # bool vs int matters on the wire only through the schema; values compare as decoded.
        out.mismatches.append(Mismatch(path or "<root>", expected, actual))


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def iter_paths(tree: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of a plain tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from iter_paths(v, _join(path, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from iter_paths(v, f"{path}[{i}]")
    else:
        yield path, tree
