"""Transactions made through the Kafka wire protocol, against any bootstrap address.

Why raw requests: tests and the demo need to know exactly which producer id, epoch, offsets and
record timestamps a transaction produced, and some states (a hanging transaction, an abandoned
one) cannot be made with a well-behaved client at all. Each connection negotiates with ApiVersions
as a real client does and sends, per API, the highest version kafka-python 3.0.12's classes, the
broker and this module's preferred maximum all allow. The maxima are the versions kafka-python
3.0.12's producer sends to a 4.0 broker (InitProducerId v4, AddPartitionsToTxn v3, Produce v9,
EndTxn v3), so a 4.0 broker sees the same traffic as from that client; the hanging transaction
prefers Produce v11 like the real-broker capture's hang-1 (tests/data/real-kafka-4.0/README.md),
which tests/conformance/replay.py reproduces. Older brokers get their own highest version.

Everything here is blocking and thread-safe per object only; `Workload` runs a churn of
transactions on its own thread for the demo.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict, Unpack

from kafka.protocol.admin.configs import DescribeConfigsRequest as _DescribeConfigsRequest
from kafka.protocol.admin.transactions import DescribeProducersRequest as _DescribeProducersRequest
from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest as _FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest as _ListOffsetsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as _ApiVersionsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_sim import __version__

# Imported for their side effect: every response class registers itself by API key.
_REGISTERED = (
    _DescribeConfigsRequest,
    _DescribeProducersRequest,
    _FetchRequest,
    _ListOffsetsRequest,
    _ApiVersionsRequest,
)

__all__ = [
    "ConnectionClosedError",
    "KafkaProtocolError",
    "OpenTransaction",
    "ProducedBatch",
    "RawKafkaClient",
    "TransactionResult",
    "VersionRange",
    "WholeTransactionOptions",
    "Workload",
    "aborted_transaction",
    "build_record_batch",
    "committed_transaction",
    "hanging_transaction",
    "idempotent_producer_write",
    "open_transaction",
    "parse_bootstrap",
    "request_class",
    "response_class",
]


class VersionRange(NamedTuple):
    """The versions of one request this module can send: `lowest` is where the fields it sets
    exist; `preferred` is the highest it sends even when client and broker know newer ones."""

    lowest: int
    preferred: int


# Preferred maxima: what kafka-python 3.0.12's producer sends to a 4.0 broker.
INIT_PRODUCER_ID_VERSIONS = VersionRange(0, 4)
# v4+ is the broker-to-broker batched form (KIP-890), another request shape.
ADD_PARTITIONS_TO_TXN_VERSIONS = VersionRange(0, 3)
# transactional_id and record batch v2 exist from v3.
PRODUCE_VERSIONS = VersionRange(3, 9)
END_TXN_VERSIONS = VersionRange(0, 3)
HANGING_PRODUCE_VERSIONS = VersionRange(3, 11)  # v11 as the capture's hang-1
# key_type from v1; v4+ batches coordinator keys (another request and response shape).
FIND_COORDINATOR_VERSIONS = VersionRange(1, 3)
# allow_auto_topic_creation from v4.
METADATA_VERSIONS = VersionRange(4, 12)

API_VERSIONS = 18

# Kafka error codes used here.
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
CONCURRENT_TRANSACTIONS = 51
INVALID_TXN_STATE = 48
UNSUPPORTED_VERSION = 35
_RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)


class KafkaProtocolError(Exception):
    """A request answered with a non-zero error code."""

    def __init__(self, what: str, error_code: int) -> None:
        super().__init__(f"{what}: error_code={error_code}")
        self.error_code = error_code


class ConnectionClosedError(EOFError):
    """The broker closed the connection without (a complete) reply."""


def _all_api_message_classes() -> Iterable[type[Any]]:
    stack: list[type[Any]] = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None:
            yield cls


_REQUEST_CLASSES: dict[int, type[Any]] = {}


def request_class(api_key: int) -> type[Any]:
    """kafka-python's request class for an API key."""
    if not _REQUEST_CLASSES:
        for cls in _all_api_message_classes():
            try:
                if cls.is_request():
                    _REQUEST_CLASSES.setdefault(int(cls.API_KEY), cls)
            except (AttributeError, TypeError):  # abstract bases
                continue
    return _REQUEST_CLASSES[api_key]


def response_class(api_key: int, api_version: int) -> type[Any]:
    """kafka-python's response class for an API key and version."""
    header = RequestHeader(
        request_api_key=api_key, request_api_version=api_version, correlation_id=0, client_id=""
    )
    cls = ResponseClassRegistry.get_response_class(header)
    if cls is None:
        raise KeyError(f"no response class for api_key={api_key}")
    return cls  # type: ignore[no-any-return]


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' (or a list of 'h:p') -> [(host, port), ...]."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"empty bootstrap address: {bootstrap!r}")
    return out


class RawKafkaClient:
    """One blocking TCP connection speaking Kafka's framing (4-byte size prefix).

    `request()` encodes a kafka-python request object with its header (v1, or v2 for flexible
    versions), reads the framed reply and decodes it with the matching response class.
    `send_raw()`/`receive_raw()` move bytes verbatim (captured requests). `api_version()` picks
    a version from the broker's ApiVersions answer, asked once (`negotiate()`): connections
    that only replay captured bytes never send it, so they carry exactly the captured traffic.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kafka-txn-exporter-workload",
        timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._broker_versions: dict[int, tuple[int, int]] | None = None

    def __enter__(self) -> RawKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def settimeout(self, timeout_s: float | None) -> None:
        self._sock.settimeout(timeout_s)

    def send_raw(self, payload: bytes) -> None:
        """Send one request: header + body, without the size prefix (added here)."""
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _read_exact(self, n: int) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while got < n:
            chunk = self._sock.recv(n - got)
            if not chunk:
                raise ConnectionClosedError(f"connection closed by broker after {got} of {n} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def receive_raw(self) -> bytes:
        """One response frame without its size prefix (response header included)."""
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def exchange_raw(self, payload: bytes) -> bytes:
        with self._lock:
            self.send_raw(payload)
            return self.receive_raw()

    def encode_request(self, request: Any, correlation_id: int | None = None) -> bytes:
        cid = next(self._correlation_ids) if correlation_id is None else correlation_id
        request.with_header(correlation_id=cid, client_id=self.client_id)
        return bytes(request.encode(header=True))

    def request(self, request: Any, *, correlation_id: int | None = None) -> Any:
        """Send a kafka-python request object; return its decoded response (None for acks=0)."""
        payload = self.encode_request(request, correlation_id)
        cid = request.header.correlation_id
        with self._lock:
            self.send_raw(payload)
            if not request.expect_response():
                return None
            raw = self.receive_raw()
        resp_cls = response_class(request.API_KEY, request.API_VERSION)
        response = resp_cls.decode(raw, version=request.API_VERSION, header=True)
        got = response.header.correlation_id
        if got != cid:
            raise KafkaProtocolError(f"correlation id {got} != {cid}", -1)
        return response

    def negotiate(self) -> dict[int, tuple[int, int]]:
        """The broker's (min, max) version per API key, from one ApiVersions exchange.

        Sent at kafka-python's highest ApiVersions version, as a client does (KIP-511): a broker
        that does not know that version answers UNSUPPORTED_VERSION with a v0 body naming its
        own ApiVersions range (capture 41), and the request is sent again inside that range.
        """
        if self._broker_versions is not None:
            return self._broker_versions
        version = int(_ApiVersionsRequest.max_version)
        while True:
            req = _ApiVersionsRequest[version](
                client_software_name="kafka-txn-sim", client_software_version=__version__
            )
            payload = self.encode_request(req)
            raw = self.exchange_raw(payload)
            # Response header v0 (correlation id), then error_code in every version's body.
            (error_code,) = struct.unpack_from(">h", raw, 4)
            answered = 0 if error_code == UNSUPPORTED_VERSION else version
            resp = response_class(API_VERSIONS, answered).decode(raw, version=answered, header=True)
            ranges = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys
            }
            if error_code == NONE:
                self._broker_versions = ranges
                return ranges
            broker_max = ranges.get(API_VERSIONS, (0, -1))[1]
            if error_code != UNSUPPORTED_VERSION or not 0 <= broker_max < version:
                raise KafkaProtocolError(f"ApiVersions v{version}", error_code)
            version = broker_max

    def api_version(self, api_key: int, usable: VersionRange) -> int:
        """Highest version of `api_key` that kafka-python's request class, the broker and
        `usable` all allow."""
        cls = request_class(api_key)
        broker_min, broker_max = self.negotiate().get(api_key, (0, -1))
        lowest = max(usable.lowest, int(cls.min_version), broker_min)
        highest = min(usable.preferred, int(cls.max_version), broker_max)
        if highest < lowest:
            raise KafkaProtocolError(
                f"no version of API {api_key} in {usable} that {self.host}:{self.port} "
                f"(v{broker_min}-v{broker_max}) and kafka-python "
                f"(v{cls.min_version}-v{cls.max_version}) share",
                UNSUPPORTED_VERSION,
            )
        return highest


# ---------------------------------------------------------------------------------------------
# Record batches


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One batch as written: where it landed and the timestamps it carried."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    base_sequence: int
    base_timestamp_ms: int
    max_timestamp_ms: int


Record = tuple[bytes | None, bytes | None, int | None]
"""(key, value, CreateTime in ms or None for 'now')."""
Records = int | Sequence[Record] | Sequence[tuple[bytes | None, bytes | None]]
"""A count of generated records, or (key, value[, CreateTime ms]) tuples."""


def build_record_batch(
    records: Sequence[Record],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    now_ms: Callable[[], int] | None = None,
) -> tuple[bytes, int, int]:
    """Encode a record batch v2 (uncompressed). Returns (bytes, base_timestamp, max_timestamp)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    clock = now_ms or (lambda: int(time.time() * 1000))
    first: int | None = None
    max_ts: int | None = None
    for offset, (key, value, ts) in enumerate(records):
        stamp = clock() if ts is None else ts
        builder.append(offset, stamp, key, value, [])
        first = stamp if first is None else first
        max_ts = stamp if max_ts is None else max(max_ts, stamp)
    if first is None or max_ts is None:
        raise ValueError("a record batch needs at least one record")
    return bytes(builder.build()), first, max_ts


def _as_records(
    records: Records,
    prefix: str,
) -> list[Record]:
    if isinstance(records, int):
        return [(f"{prefix}-k{i}".encode(), f"{prefix}-{i}".encode(), None) for i in range(records)]
    out: list[Record] = []
    for rec in records:
        if len(rec) == 2:
            out.append((rec[0], rec[1], None))
        else:
            out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------
# Cluster view (metadata, leaders, coordinators) over raw connections


class _RawCluster:
    """Connections per broker, partition leaders and transaction coordinators."""

    def __init__(self, bootstrap: str | Sequence[str], client_id: str, timeout_s: float) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._clients: dict[tuple[str, int], RawKafkaClient] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def client_at(self, address: tuple[str, int]) -> RawKafkaClient:
        client = self._clients.get(address)
        if client is None:
            client = RawKafkaClient(
                address[0], address[1], client_id=self._client_id, timeout_s=self._timeout_s
            )
            try:
                client.negotiate()  # on connect, as a client's NetworkClient does
            except BaseException:
                client.close()
                raise
            self._clients[address] = client
        return client

    def any_client(self) -> RawKafkaClient:
        last: OSError | None = None
        for address in list(self._clients) + self._bootstrap:
            try:
                return self.client_at(address)
            except OSError as exc:
                last = exc
        raise ConnectionError(f"no broker reachable in {self._bootstrap}: {last}")

    def node_client(self, node_id: int) -> RawKafkaClient:
        if node_id not in self._nodes:
            self.refresh_metadata([])
        return self.client_at(self._nodes[node_id])

    def refresh_metadata(self, topics: Sequence[str]) -> Any:
        client = self.any_client()
        req = MetadataRequest[client.api_version(MetadataRequest.API_KEY, METADATA_VERSIONS)](
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics] or None,
            allow_auto_topic_creation=False,
        )
        resp = client.request(req)
        for broker in resp.brokers:
            self._nodes[broker.node_id] = (broker.host, broker.port)
        for topic in resp.topics:
            for part in topic.partitions:
                if part.error_code == NONE and part.leader_id >= 0:
                    self._leaders[(topic.name, part.partition_index)] = part.leader_id
        return resp

    def leader_client(self, topic: str, partition: int) -> RawKafkaClient:
        key = (topic, partition)
        if key not in self._leaders:
            deadline = time.monotonic() + self._timeout_s
            while True:
                self.refresh_metadata([topic])
                if key in self._leaders or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        if key not in self._leaders:
            raise KafkaProtocolError(f"no leader for {topic}-{partition}", 3)
        return self.node_client(self._leaders[key])

    def coordinator_client(self, transactional_id: str) -> RawKafkaClient:
        """FindCoordinator (key type 1), retrying while __transaction_state is being created."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            client = self.any_client()
            version = client.api_version(FindCoordinatorRequest.API_KEY, FIND_COORDINATOR_VERSIONS)
            req = FindCoordinatorRequest[version](key=transactional_id, key_type=1)
            resp = client.request(req)
            if resp.error_code == NONE:
                self._nodes[resp.node_id] = (resp.host, resp.port)
                return self.client_at((resp.host, resp.port))
            if resp.error_code not in _RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
                raise KafkaProtocolError(f"FindCoordinator({transactional_id})", resp.error_code)
            time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# Producers


@dataclass(slots=True)
class TransactionResult:
    """What a transaction (or idempotent write) left behind, for asserting against."""

    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    batches: list[ProducedBatch] = field(default_factory=list)
    outcome: str = "open"  # open | committed | aborted | abandoned

    def start_offset(self, topic: str, partition: int) -> int:
        """Offset of this producer's first batch in the partition (= CurrentTxnStartOffset)."""
        key = (topic, partition)
        return min(b.base_offset for b in self.batches if (b.topic, b.partition) == key)

    def last_timestamp(self, topic: str, partition: int) -> int:
        """Max timestamp of the last data batch in the partition (= DescribeProducers LastTimestamp
        while the transaction is open)."""
        mine = [b for b in self.batches if (b.topic, b.partition) == (topic, partition)]
        return mine[-1].max_timestamp_ms


class _RawProducer:
    """A producer id/epoch with per-partition sequence numbers."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        transactional_id: str | None,
        *,
        transaction_timeout_ms: int = 60000,
        client_id: str = "kafka-txn-exporter-workload",
        timeout_s: float = 10.0,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._cluster = _RawCluster(bootstrap, client_id, timeout_s)
        self._timeout_s = timeout_s
        self._now_ms = now_ms
        self._sequences: dict[tuple[str, int], int] = {}
        self._added: set[tuple[str, int]] = set()
        self.producer_id = -1
        self.producer_epoch = -1
        self.batches: list[ProducedBatch] = []

    def close(self) -> None:
        self._cluster.close()

    def _coordinator(self) -> RawKafkaClient:
        assert self.transactional_id is not None
        return self._cluster.coordinator_client(self.transactional_id)

    def _retry_coordinator(self, what: str, send: Callable[[RawKafkaClient], int]) -> None:
        """Run a coordinator request, retrying retriable and concurrent-transaction errors."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            code = send(self._coordinator())
            if code == NONE:
                return
            retriable = code in _RETRIABLE_COORDINATOR_ERRORS or code == CONCURRENT_TRANSACTIONS
            if not retriable or time.monotonic() > deadline:
                raise KafkaProtocolError(what, code)
            time.sleep(0.02)

    def init_producer_id(self) -> tuple[int, int]:
        result: list[Any] = []

        def send(client: RawKafkaClient) -> int:
            version = client.api_version(InitProducerIdRequest.API_KEY, INIT_PRODUCER_ID_VERSIONS)
            req = InitProducerIdRequest[version](
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
            )
            resp = client.request(req)
            result[:] = [resp]
            return int(resp.error_code)

        if self.transactional_id is None:
            code = send(self._cluster.any_client())
            if code != NONE:
                raise KafkaProtocolError("InitProducerId", code)
            resp = result[0]
        else:
            self._retry_coordinator(f"InitProducerId({self.transactional_id})", send)
            resp = result[0]
        self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)
        self._sequences.clear()
        self._added.clear()
        return self.producer_id, self.producer_epoch

    def add_partitions(self, topic: str, partitions: Sequence[int]) -> None:
        todo = [p for p in partitions if (topic, p) not in self._added]
        if not todo:
            return
        topic_cls = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

        def send(client: RawKafkaClient) -> int:
            api_key = AddPartitionsToTxnRequest.API_KEY
            req = AddPartitionsToTxnRequest[
                client.api_version(api_key, ADD_PARTITIONS_TO_TXN_VERSIONS)
            ](
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=[topic_cls(name=topic, partitions=list(todo))],
            )
            resp = client.request(req)
            for t in resp.results_by_topic_v3_and_below:
                for p in t.results_by_partition:
                    if p.partition_error_code != NONE:
                        return int(p.partition_error_code)
            return NONE

        self._retry_coordinator(f"AddPartitionsToTxn({self.transactional_id})", send)
        self._added.update((topic, p) for p in todo)

    def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record],
        *,
        transactional: bool,
        versions: VersionRange = PRODUCE_VERSIONS,
    ) -> ProducedBatch:
        seq = self._sequences.get((topic, partition), 0)
        data, base_ts, max_ts = build_record_batch(
            records,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            transactional=transactional,
            now_ms=self._now_ms,
        )
        client = self._cluster.leader_client(topic, partition)
        topic_cls = ProduceRequest.TopicProduceData
        req = ProduceRequest[client.api_version(ProduceRequest.API_KEY, versions)](
            transactional_id=self.transactional_id if transactional else None,
            acks=-1,
            timeout_ms=int(self._timeout_s * 1000),
            topic_data=[
                topic_cls(
                    name=topic,
                    partition_data=[topic_cls.PartitionProduceData(index=partition, records=data)],
                )
            ],
        )
        resp = client.request(req)
        part = resp.responses[0].partition_responses[0]
        if part.error_code != NONE:
            raise KafkaProtocolError(f"Produce({topic}-{partition})", part.error_code)
        self._sequences[(topic, partition)] = seq + len(records)
        batch = ProducedBatch(
            topic=topic,
            partition=partition,
            base_offset=int(part.base_offset),
            record_count=len(records),
            base_sequence=seq,
            base_timestamp_ms=base_ts,
            max_timestamp_ms=max_ts,
        )
        self.batches.append(batch)
        return batch

    def end_txn(self, commit: bool) -> None:
        def send(client: RawKafkaClient) -> int:
            req = EndTxnRequest[client.api_version(EndTxnRequest.API_KEY, END_TXN_VERSIONS)](
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                committed=commit,
            )
            return int(client.request(req).error_code)

        self._retry_coordinator(f"EndTxn({self.transactional_id}, commit={commit})", send)
        self._added.clear()

    def result(self, outcome: str) -> TransactionResult:
        return TransactionResult(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            batches=list(self.batches),
            outcome=outcome,
        )


PartitionRecords = dict[int, Records]


def _per_partition(
    partitions: Sequence[int] | PartitionRecords,
    records: Records,
) -> PartitionRecords:
    if isinstance(partitions, dict):
        return partitions
    return {p: records for p in partitions}


class OpenTransaction:
    """A transaction left open; later `commit()`, `abort()`, or `abandon()` (drop the
    connections without EndTxn, like a crashed producer: the coordinator times it out)."""

    def __init__(self, producer: _RawProducer) -> None:
        self._producer = producer
        self._done = False

    @property
    def producer_id(self) -> int:
        return self._producer.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._producer.producer_epoch

    @property
    def transactional_id(self) -> str:
        assert self._producer.transactional_id is not None
        return self._producer.transactional_id

    @property
    def batches(self) -> list[ProducedBatch]:
        return list(self._producer.batches)

    def result(self) -> TransactionResult:
        return self._producer.result("open" if not self._done else "closed")

    def send(
        self,
        topic: str,
        partition: int,
        records: Records = 1,
        *,
        one_batch_per_record: bool = True,
    ) -> list[ProducedBatch]:
        """Add the partition to the transaction (if new) and write records to it."""
        recs = _as_records(records, f"{self.transactional_id}-{topic}-{partition}")
        self._producer.add_partitions(topic, [partition])
        groups = [[r] for r in recs] if one_batch_per_record else [recs]
        return [
            self._producer.produce(topic, partition, group, transactional=True) for group in groups
        ]

    def commit(self) -> TransactionResult:
        self._finish()
        self._producer.end_txn(commit=True)
        result = self._producer.result("committed")
        self._producer.close()
        return result

    def abort(self) -> TransactionResult:
        self._finish()
        self._producer.end_txn(commit=False)
        result = self._producer.result("aborted")
        self._producer.close()
        return result

    def abandon(self) -> TransactionResult:
        self._finish()
        result = self._producer.result("abandoned")
        self._producer.close()
        return result

    def close_quietly(self) -> None:
        """Drop the connections whatever state the transaction is in."""
        self._done = True
        self._producer.close()

    def _finish(self) -> None:
        if self._done:
            raise RuntimeError("transaction already finished")
        self._done = True


def open_transaction(
    bootstrap: str | Sequence[str],
    transactional_id: str,
    topic: str | None = None,
    partitions: Sequence[int] | PartitionRecords = (),
    *,
    records: Records = 1,
    transaction_timeout_ms: int = 60000,
    one_batch_per_record: bool = True,
    now_ms: Callable[[], int] | None = None,
    timeout_s: float = 10.0,
    client_id: str = "kafka-txn-exporter-workload",
) -> OpenTransaction:
    """InitProducerId, then (optionally) AddPartitionsToTxn + Produce per partition; left open.

    `partitions` is a list (each gets `records`) or {partition: records}. Records are an int
    count or (key, value[, CreateTime ms]) tuples; by default one batch per record, as
    kafka-python does when every send is followed by .get().
    """
    producer = _RawProducer(
        bootstrap,
        transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        client_id=client_id,
        timeout_s=timeout_s,
        now_ms=now_ms,
    )
    try:
        producer.init_producer_id()
        txn = OpenTransaction(producer)
        if topic is not None:
            for partition, recs in _per_partition(partitions, records).items():
                txn.send(topic, partition, recs, one_batch_per_record=one_batch_per_record)
    except BaseException:
        producer.close()
        raise
    return txn


class WholeTransactionOptions(TypedDict, total=False):
    """`open_transaction`'s options that a whole (committed or aborted) transaction takes."""

    records: Records
    transaction_timeout_ms: int
    one_batch_per_record: bool
    """Default False here: one batch per partition, as a producer that sends before flushing."""
    now_ms: Callable[[], int] | None
    timeout_s: float


def committed_transaction(
    bootstrap: str | Sequence[str],
    transactional_id: str,
    topic: str,
    partitions: Sequence[int] | PartitionRecords = (0,),
    **options: Unpack[WholeTransactionOptions],
) -> TransactionResult:
    """A complete transaction: InitProducerId, AddPartitionsToTxn, Produce, EndTxn(commit)."""
    return _whole_transaction(bootstrap, transactional_id, topic, partitions, options).commit()


def aborted_transaction(
    bootstrap: str | Sequence[str],
    transactional_id: str,
    topic: str,
    partitions: Sequence[int] | PartitionRecords = (0,),
    **options: Unpack[WholeTransactionOptions],
) -> TransactionResult:
    """Like `committed_transaction` but ends with EndTxn(abort)."""
    return _whole_transaction(bootstrap, transactional_id, topic, partitions, options).abort()


def _whole_transaction(
    bootstrap: str | Sequence[str],
    transactional_id: str,
    topic: str,
    partitions: Sequence[int] | PartitionRecords,
    options: WholeTransactionOptions,
) -> OpenTransaction:
    whole: WholeTransactionOptions = {"one_batch_per_record": False, **options}
    return open_transaction(bootstrap, transactional_id, topic, partitions, **whole)


def idempotent_producer_write(
    bootstrap: str | Sequence[str],
    topic: str,
    partition: int = 0,
    *,
    records: Records = 1,
    now_ms: Callable[[], int] | None = None,
    timeout_s: float = 10.0,
) -> TransactionResult:
    """InitProducerId without a transactional id, then one non-transactional idempotent batch."""
    producer = _RawProducer(bootstrap, None, timeout_s=timeout_s, now_ms=now_ms)
    try:
        producer.init_producer_id()
        producer.produce(
            topic, partition, _as_records(records, f"idem-{topic}-{partition}"), transactional=False
        )
        return producer.result("written")
    finally:
        producer.close()


def hanging_transaction(
    bootstrap: str | Sequence[str],
    transactional_id: str,
    topic: str,
    partition: int,
    backdate_ms: int = 0,
    *,
    records: Sequence[tuple[bytes | None, bytes | None]] | None = None,
    transaction_timeout_ms: int = 10000,
    now_ms: Callable[[], int] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, int, int]:
    """A hanging transaction made like the capture's hang-1 -> (producer_id, epoch, start_offset).

    InitProducerId, then a transactional Produce v11 (or the leader's highest below it; batch v2,
    transactional flag, sequence 0, CreateTime = now - backdate_ms) to a partition never added
    with AddPartitionsToTxn. The
    partition's log holds an open transaction the coordinator never heard of (state Empty), so
    nothing will ever end it. A broker accepts this only with
    transaction.partition.verification.enable=false.
    """
    producer = _RawProducer(
        bootstrap,
        transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        timeout_s=timeout_s,
        now_ms=now_ms,
    )
    try:
        pid, epoch = producer.init_producer_id()
        clock = now_ms or (lambda: int(time.time() * 1000))
        stamp = clock() - backdate_ms
        pairs = records or [(b"hang-key-0", f"hanging txn {transactional_id} record 0".encode())]
        recs: list[Record] = [(k, v, stamp) for k, v in pairs]
        try:
            batch = producer.produce(
                topic, partition, recs, transactional=True, versions=HANGING_PRODUCE_VERSIONS
            )
        except KafkaProtocolError as exc:
            if exc.error_code == INVALID_TXN_STATE:
                raise KafkaProtocolError(
                    f"Produce({topic}-{partition}) rejected: the broker verifies transactional "
                    "partitions; a hanging transaction needs "
                    "transaction.partition.verification.enable=false",
                    exc.error_code,
                ) from exc
            raise
        return pid, epoch, batch.base_offset
    finally:
        producer.close()


# ---------------------------------------------------------------------------------------------
# Live churn for the demo and the exporter tests


@dataclass(slots=True)
class WorkloadStats:
    committed: int = 0
    aborted: int = 0
    long_running_started: int = 0
    long_running_finished: int = 0
    errors: int = 0
    last_error: str | None = None


class Workload:
    """Committed, aborted and long-running transactions at a configurable rate, on a thread.

    Long-running transactions stay open for `long_running_ms` (then commit), so the exporter
    sees open transactions of growing age. `stop()` joins the thread and ends what is open.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        partitions: Sequence[int] = (0,),
        *,
        transactions_per_second: float = 5.0,
        abort_ratio: float = 0.2,
        long_running_ratio: float = 0.1,
        long_running_ms: int = 30000,
        max_open_long_running: int = 3,
        transaction_timeout_ms: int = 60000,
        id_prefix: str = "workload",
        seed: int | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        if transactions_per_second <= 0:
            raise ValueError("transactions_per_second must be > 0")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = list(partitions)
        self.interval_s = 1.0 / transactions_per_second
        self.abort_ratio = abort_ratio
        self.long_running_ratio = long_running_ratio
        self.long_running_ms = long_running_ms
        self.max_open_long_running = max_open_long_running
        self.transaction_timeout_ms = transaction_timeout_ms
        self.id_prefix = id_prefix
        self.stats = WorkloadStats()
        self._rng = random.Random(seed)
        self._now_ms = now_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open: list[tuple[float, OpenTransaction]] = []
        self._ids = itertools.count()

    def __enter__(self) -> Workload:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("workload already started")
        self._thread = threading.Thread(target=self._run, name="sim-workload", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for _, txn in self._open:
            try:
                txn.commit()
            except Exception:  # the cluster may already be gone at shutdown
                txn.close_quietly()
        self._open.clear()

    @property
    def open_transactions(self) -> int:
        return len(self._open)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception as exc:  # keep churning; the demo must survive broker faults
                self.stats.errors += 1
                self.stats.last_error = repr(exc)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def step(self) -> None:
        """One unit of work: finish due long-running transactions, then start one more."""
        now = time.monotonic()
        due = [item for item in self._open if item[0] <= now]
        for item in due:
            self._open.remove(item)
            item[1].commit()
            self.stats.long_running_finished += 1
        n = next(self._ids)
        partition = self._rng.choice(self.partitions)
        roll = self._rng.random()
        common: dict[str, Any] = {
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "now_ms": self._now_ms,
        }
        if roll < self.long_running_ratio and len(self._open) < self.max_open_long_running:
            txn = open_transaction(
                self.bootstrap, f"{self.id_prefix}-long-{n}", self.topic, [partition], **common
            )
            self._open.append((now + self.long_running_ms / 1000.0, txn))
            self.stats.long_running_started += 1
        elif roll < self.long_running_ratio + self.abort_ratio:
            txn_id = f"{self.id_prefix}-abort-{n % 16}"
            aborted_transaction(self.bootstrap, txn_id, self.topic, [partition], **common)
            self.stats.aborted += 1
        else:
            txn_id = f"{self.id_prefix}-commit-{n % 16}"
            committed_transaction(self.bootstrap, txn_id, self.topic, [partition], **common)
            self.stats.committed += 1
