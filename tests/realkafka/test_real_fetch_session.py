"""Fetch sessions (KIP-227) on a real broker and on the simulator: the same script, the same
answers (docs/kafka-semantics.md#fetch-sessions).

The script is what the exporter screening its partitions does: one full READ_COMMITTED Fetch
(max_wait_ms 0, min_bytes 0, partition_max_bytes 0) that opens a session at each partition's
high watermark, then incremental Fetches that name only the partitions whose fetch offset moved;
between them it writes (idempotent, transactional, an open transaction) and checks the session
rules (forgotten partitions, wrong epoch, unknown session, closing, sessionless reads, offsets
above the LSO and beyond the log end, the byte limits at 0). It runs at the exporter's Fetch
version (v10, topic names) and at the highest version both sides share (topic ids), on a fresh
topic pair each time, against the broker of the matrix version and against a fresh SimCluster
with that version's profile.

Normalized before comparing (and only this): session ids (each side's random ids become S1, S2,
... in order of appearance; 0 stays 0), topic names and ids (labels), producer ids (labels in
order of appearance), throttle time (not compared), and control batches' timestamps (the
coordinator's clock). Everything else is compared as is: top-level and partition errors, high
watermarks, LSOs, log start offsets, aborted transactions, preferred replicas, which partitions
come back in which order, and the records (byte size, and every batch decoded).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from conformance.live import sim_profile_for
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.record.default_records import DefaultRecordBatch
from kafka_sim.client import RawKafkaClient, VersionRange, parse_bootstrap
from kafka_sim.producer import (
    committed_transaction,
    open_transaction,
)
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import VERIFICATION_OFF, idempotent_write, unique
from waits import wait_for

from exporter.collect.apis.fetch import FETCH_SESSION_MAX_VERSION

NODE_ID = 1
FETCH = 1
READ_COMMITTED = 1
T0_MS = int(time.time() * 1000)
"""CreateTime of every record the script writes (both sides write the same bytes). Recent on
purpose: Kafka rolls a new log segment when a batch is more than segment.ms (7 days) newer than
the segment's first one, and a read never crosses a segment; the simulator has one segment."""
INT32_MAX = 2**31 - 1
UNKNOWN_TOPIC = "no-such-topic-fetch-session"
UNKNOWN_TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-00000000beef")


def _records(tag: str, count: int) -> list[tuple[bytes, bytes, int]]:
    return [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), T0_MS + i) for i in range(count)]


@dataclass
class Side:
    """One target (the real broker or the simulator) and what the script learnt of it."""

    name: str
    bootstrap: str
    client: RawKafkaClient
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    session_labels: dict[int, str] = field(default_factory=dict)
    producer_labels: dict[int, str] = field(default_factory=dict)

    def label_session(self, session_id: int) -> str:
        if session_id == 0:
            return "0"
        return self.session_labels.setdefault(session_id, f"S{len(self.session_labels) + 1}")

    def label_producer(self, producer_id: int) -> str:
        if producer_id < 0:
            return str(producer_id)
        return self.producer_labels.setdefault(producer_id, f"P{len(self.producer_labels) + 1}")


Read = tuple[str, int, int]
"""(topic label, partition, fetch offset)."""


@dataclass
class Script:
    """The scripted sequence on one side at one Fetch version; `steps` holds the answers."""

    side: Side
    version: int
    topics: dict[str, str]
    """label -> topic name on this side."""
    steps: list[tuple[str, Any]] = field(default_factory=list)

    # -- requests ----------------------------------------------------------------------------
    def _topic(self, label: str, version: int) -> Any:
        if label == "X":
            return {"topic": UNKNOWN_TOPIC, "topic_id": UNKNOWN_TOPIC_ID}
        name = self.topics[label]
        return (
            {"topic": name, "topic_id": self.side.topic_ids[name]}
            if version >= 13
            else {"topic": name, "topic_id": uuid.UUID(int=0)}
        )

    def fetch(
        self,
        step: str,
        session_id: int,
        epoch: int,
        reads: Sequence[Read] = (),
        forget: Sequence[tuple[str, int]] = (),
        *,
        max_bytes: int = 0,
        partition_max_bytes: int = 0,
        version: int | None = None,
    ) -> Any:
        v = self.version if version is None else version
        F = FetchRequest.FetchTopic
        topics: list[Any] = []
        for label, partition, offset in reads:
            part = F.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=partition_max_bytes,
            )
            if topics and topics[-1][0] == label:
                topics[-1][1].append(part)
            else:
                topics.append((label, [part]))
        forgotten: dict[str, list[int]] = {}
        for label, partition in forget:
            forgotten.setdefault(label, []).append(partition)
        req = FetchRequest[v](
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=READ_COMMITTED,
            session_id=session_id,
            session_epoch=epoch,
            topics=[F(partitions=parts, **self._topic(label, v)) for label, parts in topics],
            forgotten_topics_data=[
                FetchRequest.ForgottenTopic(partitions=parts, **self._topic(label, v))
                for label, parts in forgotten.items()
            ],
            rack_id="",
        )
        resp = self.side.client.request(req)
        self.steps.append((step, self._normalize(resp, v)))
        return resp

    # -- normalization -----------------------------------------------------------------------
    def _topic_label(self, topic: Any, v: int) -> str:
        if v >= 13:
            by_id = {i: n for n, i in self.side.topic_ids.items()}
            name = by_id.get(topic.topic_id, "?")
            if topic.topic_id == UNKNOWN_TOPIC_ID:
                return "X"
        else:
            name = topic.topic
            if name == UNKNOWN_TOPIC:
                return "X"
        return {n: label for label, n in self.topics.items()}.get(name, f"other:{name}")

    def _batches(self, records: bytes | None) -> list[Any]:
        out: list[Any] = []
        data = bytes(records or b"")
        pos = 0
        while pos + 61 <= len(data):
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            chunk = data[pos : pos + 12 + length]
            pos += 12 + length
            if len(chunk) < 12 + length:
                out.append(("partial batch", len(chunk)))
                break
            batch: Any = DefaultRecordBatch(chunk)
            control = bool(batch.is_control_batch)
            rows = [
                (
                    r.offset,
                    None if control else r.timestamp,
                    bytes(r.key or b""),
                    None if control else bytes(r.value or b""),
                )
                for r in batch
            ]
            out.append(
                (
                    batch.base_offset,
                    batch.last_offset_delta,
                    self.side.label_producer(batch.producer_id),
                    batch.producer_epoch,
                    batch.base_sequence,
                    batch.is_transactional,
                    control,
                    rows,
                )
            )
        if pos < len(data):
            out.append(("trailing bytes", len(data) - pos))
        return out

    def _normalize(self, resp: Any, v: int) -> Any:
        topics = []
        for t in resp.responses:
            parts = []
            for p in t.partitions:
                aborted = (
                    None
                    if p.aborted_transactions is None
                    else [
                        (self.side.label_producer(a.producer_id), a.first_offset)
                        for a in p.aborted_transactions
                    ]
                )
                parts.append(
                    {
                        "partition": p.partition_index,
                        "error": p.error_code,
                        "hw": p.high_watermark,
                        "lso": p.last_stable_offset,
                        "log_start": p.log_start_offset,
                        "aborted": aborted,
                        "preferred": p.preferred_read_replica,
                        "bytes": len(p.records or b""),
                        "batches": self._batches(p.records),
                    }
                )
            topics.append((self._topic_label(t, v), parts))
        return {
            "error": resp.error_code,
            "session": self.side.label_session(resp.session_id),
            "topics": topics,
        }

    # -- writes (the same records on both sides) ---------------------------------------------
    def idempotent(self, label: str, partition: int, tag: str, count: int = 1) -> None:
        """A short-lived idempotent producer."""
        idempotent_write(
            self.side.bootstrap, self.topics[label], partition, records=_records(tag, count)
        )

    def committed(self, label: str, partitions: dict[int, int], tag: str) -> None:
        """A committed transaction, then a wait for its COMMIT markers: a real coordinator
        writes them after EndTxn has answered (the simulator at once)."""
        committed_transaction(
            self.side.bootstrap,
            unique(f"fs-{tag}"),
            self.topics[label],
            {p: _records(f"{tag}-{p}", n) for p, n in partitions.items()},
        )
        wait_for("the COMMIT markers", lambda: self._stable(label, list(partitions)), 30.0)

    def _stable(self, label: str, partitions: list[int]) -> bool:
        """LSO == HW on every partition: a sessionless Fetch, outside the script's record."""
        F = FetchRequest.FetchTopic
        req = FetchRequest[12](
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=0,
            isolation_level=READ_COMMITTED,
            session_id=0,
            session_epoch=-1,
            topics=[
                F(
                    topic=self.topics[label],
                    partitions=[
                        F.FetchPartition(
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=0,
                        )
                        for p in partitions
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        resp = self.side.client.request(req)
        return all(
            p.last_stable_offset == p.high_watermark for t in resp.responses for p in t.partitions
        )


def run_script(script: Script) -> None:
    """The sequence. Offsets come from this side's own answers (they must be equal anyway)."""
    s = script
    s.idempotent("T", 0, "idem0", 2)
    s.committed("T", {1: 3}, "txn1")
    s.idempotent("U", 0, "idemU", 1)
    everything = [("T", 0, 0), ("T", 1, 0), ("T", 2, 0), ("U", 0, 0)]
    first = s.fetch(
        "sessionless read from 0, 1 MiB",
        0,
        -1,
        everything,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
    )
    hw = {
        (label, p): (part.high_watermark)
        for (label, p, _), part in zip(
            everything, [q for t in first.responses for q in t.partitions], strict=True
        )
    }
    at_hw = [(label, p, hw[(label, p)]) for label, p, _ in everything]

    full = s.fetch("full fetch opens a session (unknown topic first)", 0, 0, [("X", 0, 0), *at_hw])
    sid = int(full.session_id)
    s.fetch("incremental, nothing changed", sid, 1)
    s.fetch("incremental forgets the unknown topic", sid, 2, forget=[("X", 0)])
    s.fetch("incremental, nothing changed again", sid, 3)

    s.idempotent("T", 2, "idem2", 2)
    s.fetch("incremental after a write to T-2 (fetch offset still the old HW)", sid, 4)
    s.fetch(
        "incremental moves T-2's fetch offset to its new HW", sid, 5, [("T", 2, hw[("T", 2)] + 2)]
    )
    s.fetch("incremental, nothing changed after the move", sid, 6)

    txn = open_transaction(
        s.side.bootstrap, unique("fs-open"), s.topics["T"], {0: _records("open0", 2)}
    )
    try:
        s.fetch("incremental after a transaction opened on T-0", sid, 7)
        s.fetch(
            "incremental moves T-0's fetch offset above the LSO (= its HW)",
            sid,
            8,
            [("T", 0, hw[("T", 0)] + 2)],
        )
        s.fetch("incremental, nothing changed with T-0 above its LSO", sid, 9)

        s.committed("T", {1: 2, 2: 1}, "txn12")
        s.idempotent("U", 0, "idemU2", 1)
        s.fetch("incremental with committed data pending on T-1, T-2, U-0", sid, 10)
        s.fetch("incremental, the same data still pending (offsets not moved)", sid, 11)
        s.fetch("incremental, still pending", sid, 12)

        s.fetch("incremental with a wrong epoch", sid, 99)
        s.fetch("incremental with an unknown session id", sid ^ 1, 1)
        s.fetch("incremental at the right epoch after the errors", sid, 13)
        s.fetch("incremental forgets T-2", sid, 14, forget=[("T", 2)])
        s.idempotent("T", 2, "idem2b", 1)
        s.fetch("incremental after a write to the forgotten T-2", sid, 15)
        s.fetch("incremental adds T-2 back at offset 0", sid, 16, [("T", 2, 0)])

        other = s.fetch(
            "full fetch with epoch 0 on the session: closed, a new one",
            sid,
            0,
            [("T", 1, 0)],
            max_bytes=1 << 20,
            partition_max_bytes=1 << 20,
        )
        s.fetch("incremental on the closed session", sid, 17)
        sid2 = int(other.session_id)
        s.fetch("incremental on the new session", sid2, 1)
        s.fetch("incremental forgets the new session's only partition", sid2, 2, forget=[("T", 1)])
        s.fetch("incremental on that session afterwards", sid2, 3)

        s.fetch("sessionless (epoch -1) naming a session closes it", sid, -1, at_hw)
        s.fetch("incremental on the session closed by epoch -1", sid, 18)
        s.fetch("full fetch, epoch -1: sessionless", 0, -1, at_hw)

        for label, partition, log_end in (("T", 0, 4), ("T", 1, 7), ("T", 2, 5)):
            for offset in range(log_end + 2):
                s.fetch(
                    f"sessionless read of {label}-{partition} from offset {offset}",
                    0,
                    -1,
                    [(label, partition, offset)],
                    max_bytes=1 << 20,
                    partition_max_bytes=1 << 20,
                )
        s.fetch("sessionless at offset -1", 0, -1, [("T", 0, -1)])
        s.fetch(
            "sessionless, max_bytes 0 and partition_max_bytes 0, data on every partition",
            0,
            -1,
            [("T", 0, 0), ("T", 1, 0), ("T", 2, 0), ("U", 0, 0)],
        )
        s.fetch(
            "sessionless, max_bytes 0, partition_max_bytes 1 MiB",
            0,
            -1,
            [("T", 1, 0), ("T", 2, 0)],
            partition_max_bytes=1 << 20,
        )
        s.fetch(
            "sessionless, max_bytes 1 MiB, partition_max_bytes 0",
            0,
            -1,
            [("T", 2, 0), ("T", 1, 0)],
            max_bytes=1 << 20,
        )
        s.fetch(
            "sessionless, a partition the topic does not have first",
            0,
            -1,
            [("T", 9, 0), ("T", 0, 0)],
        )
        s.fetch(
            "sessionless, topics interleaved",
            0,
            -1,
            [("T", 0, 0), ("U", 0, 0), ("T", 1, 0)],
            max_bytes=1 << 20,
            partition_max_bytes=1 << 20,
        )
        s.fetch("incremental on session id -5", -5, 1)
        s.fetch("incremental on session id 2147483647", INT32_MAX, 1)
        s.fetch("full fetch closing session id 2147483647", INT32_MAX, 0, [("T", 0, 0)])
        if s.version >= 13:
            v12 = s.fetch("full fetch at v12 opens a name session", 0, 0, at_hw, version=12)
            s.fetch(
                "incremental at the topic-id version on the name session", int(v12.session_id), 1
            )
    finally:
        txn.abort()


# ---------------------------------------------------------------------------------------------


@dataclass
class Transcripts:
    version: str
    profile: str
    fetch_versions: list[int]
    real: list[Script]
    sim: list[Script]
    seconds: float


def _side(name: str, bootstrap: str) -> Side:
    host, port = parse_bootstrap(bootstrap)[0]
    return Side(name, bootstrap, RawKafkaClient(host, port))


def _topic_ids(side: Side, names: Sequence[str]) -> None:
    req = MetadataRequest[12](
        topics=[
            MetadataRequest.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=n) for n in names
        ],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    resp = side.client.request(req)
    for t in resp.topics:
        side.topic_ids[t.name] = t.topic_id


def _run_side(
    side: Side, create: Any, versions: list[int], names: list[dict[str, str]]
) -> list[Script]:
    scripts = []
    for v, topics in zip(versions, names, strict=True):
        create(topics["T"], 3)
        create(topics["U"], 1)
        _topic_ids(side, list(topics.values()))
        side.session_labels = {}  # S1 is each script's first session
        script = Script(side, v, topics)
        run_script(script)
        scripts.append(script)
    return scripts


@pytest.fixture(scope="module")
def transcripts(kafka_version: str, real_kafka: RealKafkaCluster) -> Iterator[Transcripts]:
    from kafka_sim.cluster import SimCluster

    started = time.monotonic()
    profile = sim_profile_for(kafka_version)
    names = [{"T": unique("fs-t"), "U": unique("fs-u")} for _ in range(2)]
    real = _side("real", real_kafka.bootstrap)
    try:
        top = real.client.api_version(FETCH, VersionRange(13, 18))
        versions = [FETCH_SESSION_MAX_VERSION, top]
        real_scripts = _run_side(real, lambda n, p: real_kafka.create_topic(n, p), versions, names)
    finally:
        real.client.close()
    with SimCluster(
        brokers=1, node_ids=[NODE_ID], profile=profile, broker_config=VERIFICATION_OFF
    ) as sim_cluster:
        sim = _side("sim", sim_cluster.bootstrap_servers)
        try:
            assert sim.client.api_version(FETCH, VersionRange(13, 18)) == top
            sim_scripts = _run_side(
                sim, lambda n, p: sim_cluster.create_topic(n, p), versions, names
            )
        finally:
            sim.client.close()
    yield Transcripts(
        kafka_version, profile, versions, real_scripts, sim_scripts, time.monotonic() - started
    )


def test_the_simulator_answers_every_step_as_the_broker(transcripts: Transcripts) -> None:
    problems = []
    for real, sim in zip(transcripts.real, transcripts.sim, strict=True):
        assert [n for n, _ in real.steps] == [n for n, _ in sim.steps]
        for (step, expected), (_, actual) in zip(real.steps, sim.steps, strict=True):
            if expected != actual:
                problems.append(
                    f"Fetch v{real.version}, {step}:\n  broker    {expected}\n  simulator {actual}"
                )
    assert not problems, (
        f"Kafka {transcripts.version} vs simulator profile "
        f"{transcripts.profile}:\n" + "\n".join(problems)
    )


def _parts(answer: Any) -> list[tuple[str, int, int, int, int, int, int]]:
    """(topic, partition, error, hw, lso, bytes, batches) of every partition, in order."""
    return [
        (topic, p["partition"], p["error"], p["hw"], p["lso"], p["bytes"], len(p["batches"]))
        for topic, parts in answer["topics"]
        for p in parts
    ]


def test_the_broker_keeps_sessions_as_documented(transcripts: Transcripts) -> None:
    """The facts docs/kafka-semantics.md#fetch-sessions states, read off the broker's own
    answers to the script (the comparison above then holds the simulator to them)."""
    for script in transcripts.real:
        step = dict(script.steps)
        unknown = 100 if script.version >= 13 else 3  # UNKNOWN_TOPIC_ID / _OR_PARTITION
        full = step["full fetch opens a session (unknown topic first)"]
        assert full["session"] == "S1" and full["error"] == 0
        # Readable partitions first, in request order; the unknown topic's after them.
        assert [(t, p, e) for t, p, e, *_ in _parts(full)] == [
            ("T", 0, 0),
            ("T", 1, 0),
            ("T", 2, 0),
            ("U", 0, 0),
            ("X", 0, unknown),
        ]
        # An error is always answered; an idle partition never.
        assert [(t, e) for t, _, e, *_ in _parts(step["incremental, nothing changed"])] == [
            ("X", unknown)
        ]
        assert step["incremental, nothing changed again"] == {
            "error": 0,
            "session": "S1",
            "topics": [],
        }
        wrote = _parts(step["incremental after a write to T-2 (fetch offset still the old HW)"])
        assert [(t, p, e, hw, b > 0) for t, p, e, hw, _, b, _ in wrote] == [("T", 2, 0, 2, True)]
        assert _parts(step["incremental moves T-2's fetch offset to its new HW"]) == []
        opened = _parts(step["incremental after a transaction opened on T-0"])
        assert opened == [("T", 0, 0, 4, 2, 0, 0)]  # LSO 2 < HW 4, no records, no error
        assert _parts(step["incremental, nothing changed with T-0 above its LSO"]) == []
        # Committed data pending on three partitions: all three answered (their HW moved),
        # records only for the first (KIP-74's one batch beyond partition_max_bytes 0).
        pending = _parts(step["incremental with committed data pending on T-1, T-2, U-0"])
        assert [(t, p, b > 0, n) for t, p, _, _, _, b, n in pending] == [
            ("T", 1, True, 1),
            ("U", 0, False, 0),
            ("T", 2, False, 0),
        ]
        assert step["incremental with a wrong epoch"] == {"error": 71, "session": "0", "topics": []}
        assert step["incremental with an unknown session id"]["error"] == 70
        assert step["incremental at the right epoch after the errors"]["session"] == "S1"
        assert step["incremental on the closed session"]["error"] == 70
        assert step["incremental forgets the new session's only partition"]["session"] == "0"
        closing = step["sessionless (epoch -1) naming a session closes it"]
        assert closing["session"] == "0" and len(_parts(closing)) == 4
        assert step["incremental on the session closed by epoch -1"]["error"] == 70
        # T-0: LSO 2, HW = log end 4. Above the LSO up to the log end: empty, no error.
        for offset in (2, 3, 4):
            assert _parts(step[f"sessionless read of T-0 from offset {offset}"]) == [
                ("T", 0, 0, 4, 2, 0, 0)
            ]
        assert _parts(step["sessionless read of T-0 from offset 5"]) == [
            ("T", 0, 1, -1, -1, 0, 0)
        ]  # OFFSET_OUT_OF_RANGE beyond the log end
        zero = _parts(
            step["sessionless, max_bytes 0 and partition_max_bytes 0, data on every partition"]
        )
        assert [(b > 0, n) for *_, b, n in zero] == [(True, 1), (False, 0), (False, 0), (False, 0)]
        missing = step["sessionless, a partition the topic does not have first"]
        assert [(t, p, e) for t, p, e, *_ in _parts(missing)] == [("T", 0, 0), ("T", 9, 3)]
        assert [t for t, _ in missing["topics"]] == ["T"]  # consecutive now: one entry
        assert step["incremental on session id 2147483647"]["error"] == -1
        if script.version >= 13:
            assert step["incremental at the topic-id version on the name session"]["error"] == 106
