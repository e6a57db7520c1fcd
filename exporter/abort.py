"""`kafka-txn-exporter abort`: write an ABORT marker for one hanging transaction.

The only code in the exporter that writes to Kafka. It is a separate, explicit command with its
own credentials (the `admin` section of the config): the daemon (`serve`) never imports this
module and its principal needs no write rights at all.

What it does, following `kafka-transactions.sh abort` (docs/kafka-semantics.md#abort) with the
exporter's own safety checks in front:

1. Detect again, through the same code the daemon uses: one `ClusterPoller.poll()` and
   `analyze()` classify the transaction that starts at `--start-offset` (late? hanging?).
2. Metadata -> the partition's leader; DescribeProducers on that leader -> the producer whose
   CurrentTxnStartOffset equals `--start-offset` (its id, epoch and CoordinatorEpoch), and
   ListOffsets READ_COMMITTED / READ_UNCOMMITTED -> LSO and high watermark before.
3. Refuse unless that transaction is late and classified `hanging` (`--force` overrides).
4. Print exactly what would be written; without `--yes` stop there (dry run, nothing written).
5. WriteTxnMarkers v1 (ABORT) to the leader with the reported producer id and epoch and the
   reported CoordinatorEpoch (-1, "no marker written yet", becomes 0 as Java's
   `producerState.coordinatorEpoch().orElse(0)`; never -1, which kafka-python's
   `abort_transaction` defaults to and the broker fences).
6. Check that the transaction is gone from DescribeProducers and that the LSO advanced.

Exit status: 0 aborted (or dry run ok), 1 refused, 2 error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from exporter import config as config_module
from exporter.analyze import analyze, effective_max_timeout_ms
from exporter.collect.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ClusterClient,
    describe_producers_request,
    list_offsets_request,
)
from exporter.collect.connection import BrokerConnection, CollectError, error_name
from exporter.collect.poll import ClusterPoller, wall_clock_ms
from exporter.config import ConfigError, load_settings
from exporter.logs import configure_logging
from exporter.model import (
    Classification,
    ClusterObservation,
    ClusterSnapshot,
    TopicPartition,
)
from exporter.settings import ClusterSettings, ExporterSettings, SaslSettings, TlsSettings

PROG = "kafka-txn-exporter abort"
EXIT_ABORTED = 0
EXIT_REFUSED = 1
EXIT_ERROR = 2

WRITE_TXN_MARKERS_VERSION = 1
"""Kafka 4.0 accepts 1 (trunk 1-2); v2 only adds TransactionVersion, which an admin abort
must leave at 0 (legacy marker: the epoch is not bumped)."""
CLUSTER_AUTHORIZATION_FAILED = 31
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52
VERIFY_ATTEMPTS = 20
VERIFY_DELAY_SECONDS = 0.1

ADMIN_SECTION = "admin"
_ADMIN_CLUSTER_FIELDS: dict[str, config_module.Parser] = {
    "name": config_module._cluster_name,
    "client_id": config_module._str,
}


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """The admin principal for one cluster: who may write markers (ALTER on the cluster).

    `tls` None means "use the cluster's tls"; `sasl` None means no SASL (PLAINTEXT, or a
    principal taken from the mTLS certificate)."""

    cluster: str
    client_id: str | None = None
    tls: TlsSettings | None = None
    sasl: SaslSettings | None = None


def _parse_admin(
    raw: Any, clusters: Sequence[ClusterSettings], env: Mapping[str, str]
) -> dict[str, AdminSettings]:
    """`admin: {clusters: [{name, client_id?, tls?, sasl?}]}` -> AdminSettings by cluster."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{ADMIN_SECTION}: expected a mapping with a 'clusters' list")
    unknown = set(raw) - {"clusters"}
    if unknown:
        raise ConfigError(f"{ADMIN_SECTION}: unknown key {sorted(unknown)[0]!r} (known: clusters)")
    entries = raw.get("clusters") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{ADMIN_SECTION}.clusters: expected a list")
    known = {c.name for c in clusters}
    result: dict[str, AdminSettings] = {}
    for index, entry in enumerate(entries):
        path = f"{ADMIN_SECTION}.clusters[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: expected a mapping")
        flat = {k: v for k, v in entry.items() if k not in ("tls", "sasl")}
        parsed = config_module._parse_section(flat, _ADMIN_CLUSTER_FIELDS, path)
        if "name" not in parsed:
            raise ConfigError(f"{path}.name: required")
        name = parsed["name"]
        if name not in known:
            raise ConfigError(
                f"{path}.name: no cluster named {name!r} in clusters "
                f"(configured: {', '.join(sorted(known))})"
            )
        if name in result:
            raise ConfigError(f"{path}.name: duplicate admin entry for {name!r}")
        tls = None
        if entry.get("tls") is not None:
            tls_raw = config_module._parse_section(
                entry["tls"], config_module._TLS_FIELDS, f"{path}.tls"
            )
            tls = config_module._build_tls(tls_raw, f"{path}.tls")
        sasl = None
        if entry.get("sasl") is not None:
            sasl_raw = config_module._parse_section(
                entry["sasl"], config_module._SASL_FIELDS, f"{path}.sasl"
            )
            sasl = config_module._build_sasl(sasl_raw, f"{path}.sasl", env)
        result[name] = AdminSettings(
            cluster=name, client_id=parsed.get("client_id"), tls=tls, sasl=sasl
        )
    return result


def _admin_password_envs(raw: Any) -> set[str]:
    """Names of the admin passwords' variables: the daemon loader must not see them as typos."""
    names: set[str] = set()
    if isinstance(raw, dict) and isinstance(raw.get("clusters"), list):
        for entry in raw["clusters"]:
            sasl = entry.get("sasl") if isinstance(entry, dict) else None
            if isinstance(sasl, dict) and isinstance(sasl.get("password_env"), str):
                names.add(sasl["password_env"])
    return names


def load_admin_settings(
    config_file: str | None, env: Mapping[str, str] | None = None
) -> tuple[ExporterSettings, dict[str, AdminSettings]]:
    """The exporter's settings plus the `admin` section, or raise ConfigError.

    `exporter.config.load_settings` validates everything but `admin`. Until it accepts an
    `admin` top-level key itself, the file is handed to it without that section.
    """
    env = dict(os.environ) if env is None else dict(env)
    if config_file is None and env.get("KTE_CONFIG"):
        config_file = env["KTE_CONFIG"]
    if not config_file:
        raise ConfigError(
            "--config: required (the abort command reads its credentials from the config "
            "file's 'admin' section)"
        )
    data = config_module._read_yaml(config_file)
    raw_admin = data.get(ADMIN_SECTION)
    base_env = {k: v for k, v in env.items() if k not in _admin_password_envs(raw_admin)}
    if ADMIN_SECTION in config_module._TOP_LEVEL_KEYS:
        settings = load_settings(config_file, env=base_env)
    else:
        rest = {k: v for k, v in data.items() if k != ADMIN_SECTION}
        with tempfile.TemporaryDirectory(prefix="kte-abort-") as tmp:
            stripped = Path(tmp) / "config.yaml"
            stripped.write_text(yaml.safe_dump(rest), encoding="utf-8")
            settings = load_settings(str(stripped), env=base_env)
    return settings, _parse_admin(raw_admin, settings.clusters, env)


def admin_cluster_settings(cluster: ClusterSettings, admin: AdminSettings) -> ClusterSettings:
    """The cluster's settings with the admin principal's client id, TLS and SASL."""
    return dataclasses.replace(
        cluster,
        client_id=admin.client_id or f"{cluster.client_id}-admin",
        tls=admin.tls if admin.tls is not None else cluster.tls,
        sasl=admin.sasl,
    )


# --------------------------------------------------------------------------- pure decisions


@dataclass(frozen=True, slots=True)
class ProducerState:
    """The DescribeProducers entry of the transaction to abort (as the leader reported it)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp_ms: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the exporter's detection allows the abort, and why (one line for humans)."""

    allowed: bool
    classification: Classification | None
    transactional_id: str
    reason: str


def marker_coordinator_epoch(reported: int) -> int:
    """The CoordinatorEpoch to send: the reported one, 0 when DescribeProducers says -1.

    Java TransactionsCommand: `producerState.coordinatorEpoch().orElse(0)`. -1 would be fenced
    (TRANSACTION_COORDINATOR_FENCED) on any partition that has ever had a marker from this
    producer (reference, kafka-python pitfalls)."""
    return reported if reported >= 0 else 0


def judge(
    obs: ClusterObservation,
    snapshot: ClusterSnapshot,
    settings: ClusterSettings,
    tp: TopicPartition,
    start_offset: int,
    producer_id: int,
) -> Verdict:
    """Allow only a late transaction the find-hanging rule classifies `hanging`."""
    for late in snapshot.late_transactions:
        txn = late.transaction
        if (
            (txn.topic, txn.partition) == (tp.topic, tp.partition)
            and txn.current_txn_start_offset == start_offset
            and txn.producer_id == producer_id
        ):
            age = f"open {late.age_seconds / 60:.1f} min"
            tid = late.transactional_id
            if late.classification is Classification.HANGING:
                why = (
                    "no transactional id maps to the producer"
                    if not tid
                    else f"the coordinator of {tid!r} does not list this partition"
                )
                return Verdict(True, late.classification, tid, f"hanging ({age}; {why})")
            if late.classification is Classification.COORDINATOR_TRACKED:
                state = obs.descriptions.get(tid)
                state_text = f" (state {state.state})" if state is not None else ""
                return Verdict(
                    False,
                    late.classification,
                    tid,
                    f"coordinator_tracked ({age}): the coordinator of {tid!r}{state_text} still "
                    "lists this partition and will commit or abort it itself",
                )
            return Verdict(
                False,
                late.classification,
                tid,
                f"unknown ({age}): the coordinator could not be asked, so it cannot be told "
                "apart from a transaction the coordinator will still end",
            )
    for txn in obs.open_transactions:
        if (
            (txn.topic, txn.partition) == (tp.topic, tp.partition)
            and txn.current_txn_start_offset == start_offset
            and txn.producer_id == producer_id
        ):
            threshold_ms = effective_max_timeout_ms(
                settings,
                next(
                    (b.transaction_max_timeout_ms for b in obs.brokers
                     if b.broker_id == txn.leader_id),
                    None,
                ),
            ) + round(settings.late_buffer_seconds * 1000)
            age_s = max(0, obs.observed_at_ms - txn.start_time_ms) / 1000
            return Verdict(
                False,
                None,
                obs.transactional_ids.get(producer_id, ""),
                f"not late: open {age_s / 60:.1f} min, late only after "
                f"{threshold_ms / 60000:.1f} min (transaction.max.timeout.ms + late buffer); "
                "a transaction that young may still be ended by its producer or coordinator",
            )
    if tp in obs.unobserved:
        return Verdict(
            False, None, "", f"the poll could not observe {tp.topic}-{tp.partition}: "
            f"{obs.unobserved[tp]}"
        )
    return Verdict(False, None, "", "the detection poll did not see this transaction open")


def describe_plan(
    cluster: str,
    tp: TopicPartition,
    leader_id: int,
    leader_address: tuple[str, int] | None,
    producer: ProducerState,
    verdict: Verdict,
    last_stable_offset: int | None,
    high_watermark: int | None,
) -> str:
    """Exactly what will be written, one field per line."""
    epoch = marker_coordinator_epoch(producer.coordinator_epoch)
    epoch_note = (
        " (DescribeProducers reported -1: no marker yet on this partition; Java uses 0)"
        if producer.coordinator_epoch < 0
        else " (as DescribeProducers reported)"
    )
    where = f" at {leader_address[0]}:{leader_address[1]}" if leader_address else ""
    lines = [
        ("Cluster", cluster),
        ("Topic", tp.topic),
        ("Partition", str(tp.partition)),
        ("Leader", f"broker {leader_id}{where}"),
        ("ProducerId", str(producer.producer_id)),
        ("ProducerEpoch", str(producer.producer_epoch)),
        ("CoordinatorEpoch", f"{epoch}{epoch_note}"),
        ("StartOffset", str(producer.current_txn_start_offset)),
        ("Marker", f"ABORT (WriteTxnMarkers v{WRITE_TXN_MARKERS_VERSION} to the leader)"),
        ("TransactionalId", verdict.transactional_id or "(none maps to the producer)"),
        ("Classification", verdict.reason),
        (
            "LastStableOffset",
            "unknown" if last_stable_offset is None else
            f"{last_stable_offset} (high watermark {high_watermark})",
        ),
    ]
    width = max(len(k) for k, _ in lines) + 1
    return "".join(f"  {k + ':':<{width}} {v}\n" for k, v in lines)


def write_txn_markers_request(
    tp: TopicPartition, producer: ProducerState
) -> Callable[[BrokerConnection], Any]:
    """WriteTxnMarkers v1, ABORT, one partition, with the reported producer and epochs."""

    def build(connection: BrokerConnection) -> Any:
        marker_class = WriteTxnMarkersRequest.WritableTxnMarker
        topic_class = marker_class.WritableTxnMarkerTopic
        return WriteTxnMarkersRequest(
            markers=[
                marker_class(
                    producer_id=producer.producer_id,
                    producer_epoch=producer.producer_epoch,
                    transaction_result=False,  # false = ABORT
                    topics=[topic_class(name=tp.topic, partition_indexes=[tp.partition])],
                    coordinator_epoch=marker_coordinator_epoch(producer.coordinator_epoch),
                )
            ],
            version=connection.version_for(
                WriteTxnMarkersRequest, max_version=WRITE_TXN_MARKERS_VERSION
            ),
        )

    return build


def marker_error_message(code: int, admin: AdminSettings, tp: TopicPartition) -> str:
    """A WriteTxnMarkers per-partition error, with what to do about the common ones."""
    name = error_name(code)
    if code == CLUSTER_AUTHORIZATION_FAILED:
        who = f"User:{admin.sasl.username}" if admin.sasl is not None else None
        return (
            f"permission denied: the broker answered {name} ({code}). Writing a transaction "
            f"marker needs ALTER (or CLUSTER_ACTION) on the Kafka cluster resource, which "
            f"{who or 'the admin principal'} of cluster {admin.cluster!r} does not have. "
            "Grant it, e.g.\n"
            "  kafka-acls.sh --bootstrap-server ... --add --allow-principal "
            f"{who or 'User:<admin principal>'} "
            "--operation Alter --cluster\n"
            "or set admin.clusters[].sasl to a principal that has it. Nothing was written."
        )
    if code == TRANSACTION_COORDINATOR_FENCED:
        return (
            f"{name} ({code}): the partition has seen a marker from a newer coordinator epoch "
            "since the check; run the command again to re-read it. Nothing was written."
        )
    if code == INVALID_PRODUCER_EPOCH:
        return (
            f"{name} ({code}): the producer's epoch moved on since the check (the producer or "
            "its coordinator acted); run the command again. Nothing was written."
        )
    return f"WriteTxnMarkers for {tp.topic}-{tp.partition} failed: {name} ({code})"


# --------------------------------------------------------------------------- I/O


class AbortFailed(Exception):
    """An error (exit 2); the message is for the operator."""


@dataclass(slots=True)
class PartitionState:
    leader_id: int
    leader_address: tuple[str, int] | None
    producers: list[ProducerState]
    last_stable_offset: int | None
    high_watermark: int | None

    def open_at(self, start_offset: int) -> ProducerState | None:
        return next(
            (p for p in self.producers if p.current_txn_start_offset == start_offset), None
        )


class _AdminSession:
    """A ClusterClient on a private event loop, one step at a time.

    The loop is driven with run_until_complete per step so that `ClusterPoller.poll()`, which
    runs its own loop, can be called between steps on the same thread."""

    def __init__(self, settings: ClusterSettings) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = ClusterClient(settings)

    def run(self, step: Any) -> Any:
        return self._loop.run_until_complete(step)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self._client.close())
        self._loop.close()

    async def partition_state(self, tp: TopicPartition) -> PartitionState:
        client = self._client
        client.begin_poll()
        try:
            meta = await client.metadata([tp.topic])
        except CollectError as exc:
            raise AbortFailed(f"Metadata failed: {exc.kind}: {exc}") from exc
        if tp in meta.leaderless:
            raise AbortFailed(f"{tp.topic}-{tp.partition} has no leader: {meta.leaderless[tp]}")
        leader = meta.leaders.get(tp)
        if leader is None:
            raise AbortFailed(f"unknown topic or partition: {tp.topic}-{tp.partition}")
        try:
            response = await client.send(
                leader, describe_producers_request([(tp.topic, [tp.partition])])
            )
        except CollectError as exc:
            raise AbortFailed(f"DescribeProducers to broker {leader}: {exc.kind}: {exc}") from exc
        producers: list[ProducerState] = []
        for topic in response.topics:
            for p in topic.partitions:
                if p.partition_index != tp.partition:
                    continue
                if p.error_code != 0:
                    hint = (
                        " (DescribeProducers needs READ on the topic)"
                        if p.error_code == TOPIC_AUTHORIZATION_FAILED
                        else ""
                    )
                    raise AbortFailed(
                        f"DescribeProducers {tp.topic}-{tp.partition} on broker {leader}: "
                        f"{error_name(p.error_code)}{hint}"
                    )
                producers.extend(
                    ProducerState(
                        producer_id=s.producer_id,
                        producer_epoch=s.producer_epoch,
                        coordinator_epoch=s.coordinator_epoch,
                        last_timestamp_ms=s.last_timestamp,
                        current_txn_start_offset=s.current_txn_start_offset,
                    )
                    for s in p.active_producers
                )
        lso, hw = await self._offsets(leader, tp)
        return PartitionState(leader, meta.brokers.get(leader), producers, lso, hw)

    async def _offsets(self, leader: int, tp: TopicPartition) -> tuple[int | None, int | None]:
        """(LSO, high watermark) by ListOffsets latest READ_COMMITTED / READ_UNCOMMITTED."""
        found: list[int | None] = []
        for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
            try:
                response = await self._client.send(
                    leader, list_offsets_request({tp.topic: [tp.partition]}, isolation)
                )
            except CollectError:
                found.append(None)
                continue
            offsets = [
                p.offset
                for t in response.topics
                for p in t.partitions
                if p.partition_index == tp.partition and p.error_code == 0
            ]
            found.append(offsets[0] if offsets else None)
        return found[0], found[1]

    async def write_abort_marker(
        self, leader: int, tp: TopicPartition, producer: ProducerState
    ) -> int:
        """Send the marker; the partition's error code (0 = written)."""
        try:
            response = await self._client.send(leader, write_txn_markers_request(tp, producer))
        except CollectError as exc:
            raise AbortFailed(
                f"WriteTxnMarkers to broker {leader}: {exc.kind}: {exc} (the marker may or may "
                "not have been written: run the command again to check)"
            ) from exc
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    if topic.name == tp.topic and p.partition_index == tp.partition:
                        return int(p.error_code)
        raise AbortFailed("WriteTxnMarkers answer did not mention the partition")


# --------------------------------------------------------------------------- the command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Abort one hanging transaction by writing an ABORT marker to its partition "
            "(like kafka-transactions.sh abort), after detecting it again. Without --yes "
            "it only prints what it would write. Credentials: the config file's "
            "admin.clusters[] entry for --cluster (the exporter's own principal stays "
            "read-only). Exit status: 0 aborted (or dry run ok), 1 refused, 2 error."
        ),
    )
    parser.add_argument("--config", "-c", metavar="FILE",
                        help="YAML config file with clusters and admin (env KTE_CONFIG)")
    parser.add_argument("--cluster", required=True, metavar="NAME", help="cluster name")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", required=True, type=int)
    parser.add_argument("--start-offset", required=True, type=int, dest="start_offset",
                        help="the transaction's StartOffset (CurrentTxnStartOffset)")
    parser.add_argument("--force", action="store_true",
                        help="abort even when the transaction is not classified hanging")
    parser.add_argument("--yes", action="store_true",
                        help="really write the marker (default: dry run)")
    return parser


def run_abort(
    argv: list[str],
    *,
    clock_ms: Callable[[], int] = wall_clock_ms,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The `abort` subcommand; `argv` excludes the word `abort`."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_ERROR
    try:
        settings, admins = load_admin_settings(args.config, env)
    except ConfigError as exc:
        err.write(f"{PROG}: config error: {exc}\n")
        return EXIT_ERROR
    # Progress and warnings of the shared poll code go to stderr; stdout holds the plan.
    configure_logging(
        settings.log_format, "debug" if settings.log_level == "debug" else "warning", stream=err
    )
    cluster = next((c for c in settings.clusters if c.name == args.cluster), None)
    if cluster is None:
        err.write(
            f"{PROG}: --cluster: unknown cluster {args.cluster!r} "
            f"(configured: {', '.join(sorted(c.name for c in settings.clusters))})\n"
        )
        return EXIT_ERROR
    admin = admins.get(cluster.name)
    if admin is None:
        err.write(
            f"{PROG}: config error: admin.clusters: no entry for cluster {cluster.name!r}. The "
            "exporter's own credentials are read-only by design; add an admin entry with a "
            "principal that has ALTER on the cluster (see docs/abort.md).\n"
        )
        return EXIT_ERROR
    tp = TopicPartition(args.topic, args.partition)
    try:
        return _abort(
            admin_cluster_settings(cluster, admin), admin, tp, args.start_offset,
            force=args.force, yes=args.yes, clock_ms=clock_ms, out=out, err=err,
        )
    except AbortFailed as exc:
        err.write(f"{PROG}: error: {exc}\n")
        return EXIT_ERROR
    except OSError as exc:  # e.g. an unreadable TLS key or CA file when building the client
        err.write(f"{PROG}: error: cluster {cluster.name}: cannot create its client: {exc}\n")
        return EXIT_ERROR


def _abort(
    settings: ClusterSettings,
    admin: AdminSettings,
    tp: TopicPartition,
    start_offset: int,
    *,
    force: bool,
    yes: bool,
    clock_ms: Callable[[], int],
    out: TextIO,
    err: TextIO,
) -> int:
    # 1. Detect again through the daemon's own path.
    poller = ClusterPoller(settings, clock_ms=clock_ms)
    try:
        obs = poller.poll()
    finally:
        poller.close()
    if not obs.brokers:
        errors = ", ".join(sorted({e.error for e in obs.request_errors})) or "no brokers"
        raise AbortFailed(f"cannot reach cluster {settings.name!r}: {errors}")
    snapshot = analyze(obs, settings)

    session = _AdminSession(settings)
    try:
        # 2. The leader's current view of the partition, right before deciding.
        before = session.run(session.partition_state(tp))
        producer = before.open_at(start_offset)
        if producer is None:
            err.write(
                f"{PROG}: refused: no open transaction starts at offset {start_offset} on "
                f"{tp.topic}-{tp.partition} (leader {before.leader_id}); "
                + _open_list(before) + "\n"
            )
            return EXIT_REFUSED
        # 3. Refuse unless hanging.
        verdict = judge(obs, snapshot, settings, tp, start_offset, producer.producer_id)
        plan = describe_plan(
            settings.name, tp, before.leader_id, before.leader_address, producer, verdict,
            before.last_stable_offset, before.high_watermark,
        )
        if not verdict.allowed and not force:
            err.write(f"{PROG}: refused: the transaction is not classified hanging: "
                      f"{verdict.reason}\nUse --force to abort it anyway.\n")
            out.write("Would have written (refused, nothing written):\n" + plan)
            return EXIT_REFUSED
        if not verdict.allowed:
            err.write(
                "WARNING: --force: aborting a transaction that is NOT classified hanging: "
                f"{verdict.reason}\nWARNING: if its producer or coordinator is still working "
                "on it, its records are discarded for read_committed consumers and the "
                "producer will fail with an epoch or sequence error.\n"
            )
        # 4. Dry run.
        if not yes:
            out.write("Dry run: would write this ABORT marker:\n" + plan)
            out.write("Nothing written. Run again with --yes to write it.\n")
            return EXIT_ABORTED
        out.write("Writing this ABORT marker:\n" + plan)
        # 5. Write.
        code = session.run(session.write_abort_marker(before.leader_id, tp, producer))
        if code != 0:
            raise AbortFailed(marker_error_message(code, admin, tp))
        # 6. Verify: gone from DescribeProducers, LSO advanced.
        return _verify(session, tp, producer, before, out, err)
    finally:
        session.close()


def _open_list(state: PartitionState) -> str:
    starts = sorted(
        (p.current_txn_start_offset, p.producer_id)
        for p in state.producers
        if p.current_txn_start_offset >= 0
    )
    if not starts:
        return "the partition has no open transaction"
    return "open transactions start at: " + ", ".join(
        f"{offset} (producer {pid})" for offset, pid in starts
    )


def _verify(
    session: _AdminSession,
    tp: TopicPartition,
    producer: ProducerState,
    before: PartitionState,
    out: TextIO,
    err: TextIO,
) -> int:
    start = producer.current_txn_start_offset
    older = [
        p for p in before.producers
        if 0 <= p.current_txn_start_offset < start and p.producer_id != producer.producer_id
    ]
    after = before
    for attempt in range(VERIFY_ATTEMPTS):
        after = session.run(session.partition_state(tp))
        still_open = after.open_at(start) is not None
        advanced = (
            before.last_stable_offset is not None
            and after.last_stable_offset is not None
            and after.last_stable_offset > before.last_stable_offset
        )
        if not still_open and (advanced or older):
            break
        if attempt + 1 < VERIFY_ATTEMPTS:
            time.sleep(VERIFY_DELAY_SECONDS)
    if after.open_at(start) is not None:
        raise AbortFailed(
            f"the marker was accepted but DescribeProducers still shows a transaction at "
            f"offset {start} on {tp.topic}-{tp.partition}"
        )
    lso_text = f"{before.last_stable_offset} -> {after.last_stable_offset}"
    if before.last_stable_offset is None or after.last_stable_offset is None:
        err.write(f"{PROG}: warning: could not read the LSO (ListOffsets) to confirm\n")
    elif after.last_stable_offset <= before.last_stable_offset:
        if older:
            out.write(
                f"Aborted. The LSO stays at {after.last_stable_offset}: an older open "
                f"transaction starts at offset {older[0].current_txn_start_offset} "
                f"(producer {older[0].producer_id}).\n"
            )
            return EXIT_ABORTED
        raise AbortFailed(
            f"the transaction is gone but the LSO did not advance ({lso_text})"
        )
    out.write(
        f"Aborted: no open transaction at offset {start} any more; "
        f"last stable offset {lso_text}.\n"
    )
    return EXIT_ABORTED
