"""scripts/refresh-captures: regenerate the real-broker captures from a real broker, on demand.

Runs the capture scenarios (replay.py: the whole transactions timeline, waiting the 25 s and
80 s in real time; replay_groups.py: the consumer-group scenario) on a fresh single-node broker
from the jars scripts/install-kafka installed, with the capture's settings and addresses
(PLAINTEXT 127.0.0.1:19092, controller 19094, transaction.max.timeout.ms=60000, partition
verification off), sending every captured request as recorded. Each exchange file is rewritten
in the same format: the request (Fetch with the new topic ids), the broker's answer (hex and
decoded), the wall-clock stamps, and the `context` facts this run re-measured (topic ids, record
CreateTimes); a context or description value that stood for a fact of the old run and was not
re-measured is replaced by null. Kafka's CLI and JMX records (42-44, 54) are run again.

    scripts/refresh-captures [--kafka.version 4.0.2] [--out tests/data/real-kafka-4.0]

The groups capture goes to OUT-groups. Review the diff (`git diff tests/data`), then update the
READMEs there if the scenario changed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka_sim.realkafka import KafkaInstall, KafkaNotInstalled, RealKafkaCluster

from .harness import DATA_DIR, Capture, decode_record_batches, to_plain
from .live import LiveBroker
from .replay import TOPICS as TXN_TOPICS
from .replay import Replay
from .replay_groups import TOPICS as GROUP_TOPICS
from .replay_groups import GroupsReplay

CAPTURE_PORT = 19092
CAPTURE_CONTROLLER_PORT = 19094
CAPTURE_SETTINGS = {
    "transaction.partition.verification.enable": "false",
    "transaction.max.timeout.ms": "60000",
}
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
JMX_TOOL = "org.apache.kafka.tools.JmxTool"
LATE_GAUGE = "kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount"
_TIMESTAMP = re.compile(r"\b1\d{12}\b")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


NODE_KEYS = frozenset({
    "process.roles", "node.id", "controller.quorum.voters", "listeners", "advertised.listeners",
    "controller.listener.names", "inter.broker.listener.name", "listener.security.protocol.map",
    "log.dirs",
})
"""What makes a realkafka node a node (addresses, roles, its data directory)."""


def capture_static_configs() -> dict[str, str]:
    """The capture broker's server.properties, as its DescribeConfigs 06 answer shows them
    (config_source 4, STATIC_BROKER_CONFIG), addresses and directories left out."""
    data = json.loads((DATA_DIR / "06-describeconfigs-v4-broker-all.json").read_text())
    return {
        c["name"]: c["value"]
        for c in data["response"]["results"][0]["configs"]
        if c["config_source"] == 4 and c["name"] not in NODE_KEYS and c["name"] != "broker.id"
    }


class CaptureBroker(RealKafkaCluster):
    """A realkafka node with the capture broker's static configuration instead of realkafka's
    test defaults (4 internal-topic partitions, 16 MiB segments, ...): the internal topics'
    partition counts decide the coordinators' list orders."""

    def _properties(self, node: Any) -> dict[str, str]:
        props = super()._properties(node)
        kept = {k: v for k, v in props.items() if k in NODE_KEYS}
        return {**kept, **capture_static_configs(), **CAPTURE_SETTINGS}


def start_capture_broker(version: str, workdir: Path) -> RealKafkaCluster:
    """One fresh broker on the capture's ports, with the capture's configuration."""
    cluster = CaptureBroker(install=KafkaInstall.find(version), workdir=workdir)
    node = cluster._nodes[0]  # the capture's fixed ports (realkafka picks free ones)
    node.port, node.controller_port = CAPTURE_PORT, CAPTURE_CONTROLLER_PORT
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise


# ---------------------------------------------------------------------------------------------
# Old run -> new run


class Remap:
    """Values of the old capture that stand for a fact of its run -> this run's value."""

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}
        self.stale: set[int] = set()
        """Old wall-clock values with no new counterpart: written as null."""

    def add(self, old: Any, new: Any) -> None:
        if old is not None:
            self.values[old] = new

    def apply(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.apply(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.apply(v) for v in value]
        if isinstance(value, bool):
            return value
        if isinstance(value, int | str) and value in self.values:
            return self.values[value]
        if isinstance(value, int) and _TIMESTAMP.fullmatch(str(value)):
            return None
        return value

    def text(self, text: str) -> str:
        def swap(match: re.Match[str]) -> str:
            new = self.values.get(int(match.group(0)))
            return "null" if new is None else str(new)

        for old, new in self.values.items():
            if isinstance(old, str) and isinstance(new, str):
                text = text.replace(old, new)
        return _TIMESTAMP.sub(swap, text)


def txn_remap(old: dict[str, Capture], replay: Replay) -> Remap:
    f = replay.facts
    remap = Remap()
    for name, old_id in f.capture_topic_ids.items():
        remap.add(old_id, f.sim_topic_ids.get(name))
    c23 = old["23-committed-describeproducers-txn-committed-0.json"].data["context"]
    if f.idempotent:
        remap.add(int(c23["idempotent_producer"]["timestamp"]),
                  f.idempotent.batches[0].max_timestamp_ms)
    if f.committed:
        for ts in c23["transactional_producer"]["timestamps"]:
            remap.add(int(ts), f.committed.batches[0].max_timestamp_ms)
    c14 = old["14-open-describeproducers-txn-open-0-1-2.json"].data["context"]
    for i, rec in enumerate(c14["records"]):
        if f.open_txn and i < len(f.open_txn.batches):
            remap.add(int(rec["timestamp"]), f.open_txn.batches[i].max_timestamp_ms)
    c30 = old["30-hanging-describetransactions-hang-1.json"].data["context"]
    remap.add(int(c30["record_timestamp_ms"]), f.hang_timestamp_ms)
    c45 = old["45-timeout-before-describeproducers-txn-open-2.json"].data["context"]
    if f.timeout_txn:
        remap.add(int(c45["timestamp"]), f.timeout_txn.batches[0].max_timestamp_ms)
    return remap


def groups_remap(old: dict[str, Capture], replay: GroupsReplay) -> Remap:
    remap = Remap()
    ctx = old["01-listgroups-v5-all.json"].data["context"]
    remap.add(int(ctx["hanging"]["record_timestamp_ms"]), replay.facts.hang_timestamp_ms)
    return remap


# ---------------------------------------------------------------------------------------------
# Writing the files


def _software(data: dict[str, Any], version: str) -> None:
    broker = data.get("broker")
    if isinstance(broker, dict) and "software" in broker:
        broker["software"] = (
            f"Apache Kafka {version} (KRaft, combined broker+controller, node.id=1)"
        )


def exchange_record(
    cap: Capture,
    ex: Any,
    remap: Remap,
    version: str,
    decode: Callable[[str], Any],
    topic_names: dict[str, str],
) -> dict[str, Any]:
    """The capture file of one exchange, with this run's request and answer."""
    data: dict[str, Any] = json.loads(json.dumps(cap.data))
    data["request_hex"] = ex.request.hex() if hasattr(ex, "request") else cap.data["request_hex"]
    if cap.api_key == 1 and "request" in data:
        req = FetchRequest.decode(bytes.fromhex(data["request_hex"]), version=cap.request_version,
                                  header=True)
        data["request"] = to_plain(req)
    for key in ("request_sent_at_ms", "captured_at_ms"):
        data[key] = None
    if hasattr(ex, "sent_at_ms"):
        data["request_sent_at_ms"] = ex.sent_at_ms or None
        data["captured_at_ms"] = ex.received_at_ms or None
    if "context" in data:
        data["context"] = remap.apply(data["context"])
    data["description"] = remap.text(str(data.get("description", "")))
    _software(data, version)
    if ex.response is None:
        data.update(response_hex=None, response=None)
        data.pop("response_size", None)
        if getattr(ex, "closed", False):
            data["connection_closed"] = True
        return data
    decoded = decode(cap.file)
    data["response_hex"] = ex.response.hex()
    data["response_size"] = len(ex.response)
    if "response_header" in data:
        data["response_header"] = {"correlation_id": decoded.header.correlation_id}
    data["response"] = _as_before(to_plain(decoded), cap.data.get("response"))
    if "kafka_python_reencode_matches_raw" in data:
        reencoded = bytes(decoded.encode(header=True))
        data["kafka_python_reencode_matches_raw"] = reencoded == ex.response
    if "decoded_record_batches" in data:
        batches: dict[str, Any] = {}
        for topic in decoded.responses:
            name = topic_names.get(str(topic.topic_id), str(topic.topic_id))
            for part in topic.partitions:
                decoded_batches = decode_record_batches(bytes(part.records or b""))
                for b in decoded_batches:
                    b.pop("_crc_valid", None)
                batches[f"{name}-{part.partition_index}"] = decoded_batches
        data["decoded_record_batches"] = batches
    return data


NOT_REQUESTED = -2147483648


def _as_before(new: Any, old: Any) -> Any:
    """Keep the old file's spelling of a bitfield that was not requested (null; groups 14)."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {
            k: None
            if k == "authorized_operations" and v == NOT_REQUESTED and k in old and old[k] is None
            else _as_before(v, old.get(k))
            for k, v in new.items()
        }
    if isinstance(new, list) and isinstance(old, list):
        return [_as_before(v, old[i] if i < len(old) else None) for i, v in enumerate(new)]
    return new


def tool_record(
    cap: Capture, remap: Remap, version: str, command: str, result: Any
) -> dict[str, Any]:
    """A CLI/JMX record: the tool's output of this run (its start/end were not stamped)."""
    data: dict[str, Any] = json.loads(json.dumps(cap.data))
    data.update(
        command=command,
        returncode=result.returncode,
        stdout=result.stdout,
        stderr=result.stderr,
        started_at_ms=None,
        captured_at_ms=None,
    )
    if "context" in data:
        data["context"] = remap.apply(data["context"])
    data["description"] = remap.text(str(data.get("description", "")))
    _software(data, version)
    return data


def _write(out: Path, name: str, data: dict[str, Any]) -> None:
    (out / name).write_text(json.dumps(data, indent=1) + "\n")


def refresh_transactions(version: str, out: Path, workdir: Path) -> None:
    cluster = start_capture_broker(version, workdir / "txn")
    tools: dict[str, tuple[str, Any]] = {}
    """file -> (command as the capture wrote it, the tool's CompletedProcess)."""
    bootstrap = f"127.0.0.1:{CAPTURE_PORT}"

    def after_errors() -> None:
        for file, args in (
            ("42-hanging-cli-find-hanging.json",
             ("find-hanging", "--broker-id", "1", "--max-transaction-timeout", "1")),
            ("43-hanging-cli-describe-producers-hang-test-0.json",
             ("describe-producers", "--topic", "hang-test", "--partition", "0")),
        ):
            command = f"bin/kafka-transactions.sh --bootstrap-server {bootstrap} " + " ".join(args)
            tools[file] = (command, cluster.tool(TRANSACTIONS, "--bootstrap-server", bootstrap,
                                                 *args))
        tools["44-hanging-jmx-partitions-with-late-transactions.json"] = _jmx(cluster)

    def after_final() -> None:
        tools["54-final-jmx-partitions-with-late-transactions.json"] = _jmx(cluster)

    try:
        target = LiveBroker(cluster)
        for name, partitions in TXN_TOPICS.items():
            target.create_topic(name, partitions)
        replay = Replay(target)
        replay.run(after_errors=after_errors, after_final=after_final)
    finally:
        cluster.stop()
    if replay.step_errors:
        raise RuntimeError("\n".join(replay.step_errors))
    remap = txn_remap(replay.captures, replay)
    names = {v: k for k, v in replay.facts.sim_topic_ids.items()}
    out.mkdir(parents=True, exist_ok=True)
    for file, cap in replay.captures.items():
        if cap.is_exchange:
            ex = replay.exchanges[file]
            _write(out, file, exchange_record(cap, ex, remap, version, replay.decoded, names))
        else:
            command, result = tools[file]
            _write(out, file, tool_record(cap, remap, version, command, result))


def _jmx(cluster: RealKafkaCluster) -> tuple[str, Any]:
    url = cluster.jmx_url(1)
    command = f"bin/kafka-jmx.sh --jmx-url {url} --object-name {LATE_GAUGE} --one-time true"
    return command, cluster.tool(JMX_TOOL, "--jmx-url", url, "--object-name", LATE_GAUGE,
                                 "--one-time", "true")


def refresh_groups(version: str, out: Path, workdir: Path) -> None:
    cluster = start_capture_broker(version, workdir / "groups")
    try:
        target = LiveBroker(cluster)
        for name, partitions in GROUP_TOPICS.items():
            target.create_topic(name, partitions)
        replay = GroupsReplay(target)
        replay.run()
    finally:
        cluster.stop()
    if replay.step_errors:
        raise RuntimeError("\n".join(replay.step_errors))
    remap = groups_remap(replay.captures, replay)
    out.mkdir(parents=True, exist_ok=True)
    for file, cap in replay.captures.items():
        ex = replay.exchanges[file]
        data = exchange_record(cap, ex, remap, version, replay.decoded, {})
        data["request_sent_at_ms"] = data["captured_at_ms"] = None  # not stamped by this replay
        _write(out, file, data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/refresh-captures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka.version", dest="version", default="4.0.2",
                        help="the installed Kafka version to capture (default 4.0.2)")
    parser.add_argument("--out", default=None, help="transactions capture directory "
                        "(default tests/data/real-kafka-MAJOR.MINOR; groups: OUT-groups)")
    args = parser.parse_args(argv)
    major_minor = ".".join(args.version.split(".")[:2])
    out = Path(args.out) if args.out else DATA_DIR.parent / f"real-kafka-{major_minor}"
    for port in (CAPTURE_PORT, CAPTURE_CONTROLLER_PORT):
        if not _port_free(port):
            print(f"refresh-captures: port {port} is in use (the captures' address)",
                  file=sys.stderr)
            return 2
    workdir = Path(tempfile.mkdtemp(prefix="kte-refresh-captures-"))
    try:
        refresh_transactions(args.version, out, workdir)
        refresh_groups(args.version, Path(f"{out}-groups"), workdir)
    except KafkaNotInstalled as exc:
        print(f"refresh-captures: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"refresh-captures: wrote {out} and {out}-groups from Apache Kafka {args.version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
