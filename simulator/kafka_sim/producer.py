"""A raw producer: transactions made through the Kafka wire protocol, against any bootstrap address.

Why raw requests: tests and the demo need to know exactly which producer id, epoch, offsets and
record timestamps a transaction produced, and some states (a hanging transaction, an abandoned
one) cannot be made with a well-behaved client at all. Per API this sends the highest version
kafka-python's classes, the broker and the preferred maximum below all allow. The maxima are the
versions kafka-python 3.0.12's producer sends to a 4.0 broker (InitProducerId v4,
AddPartitionsToTxn v3, Produce v9, EndTxn v3), so a 4.0 broker sees the same traffic as from
that client; the hanging transaction prefers Produce v11 like the real-broker capture's hang-1
(tests/data/real-kafka-4.0/README.md), which tests/conformance/replay.py reproduces. Older
brokers get their own highest version.

Everything here is blocking and thread-safe per object only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from kafka.protocol.admin import DescribeTransactionsRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_sim.client import KafkaProtocolError, RawKafkaClient, VersionRange
from kafka_sim.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_TXN_STATE,
    NONE,
    RETRIABLE_COORDINATOR_ERRORS,
    TRANSACTION_ABORTABLE,
)
from kafka_sim.routing import RawCluster

__all__ = [
    "OpenTransaction",
    "ProducedBatch",
    "TransactionResult",
    "WholeTransactionOptions",
    "aborted_transaction",
    "build_record_batch",
    "committed_transaction",
    "hanging_transaction",
    "idempotent_producer_write",
    "idempotent_producer_write_all",
    "open_transaction",
]

# Preferred maxima: what kafka-python 3.0.12's producer sends to a 4.0 broker.
INIT_PRODUCER_ID_VERSIONS = VersionRange(0, 4)
# v4+ is the broker-to-broker batched form (KIP-890), another request shape.
ADD_PARTITIONS_TO_TXN_VERSIONS = VersionRange(0, 3)
# transactional_id and record batch v2 exist from v3.
PRODUCE_VERSIONS = VersionRange(3, 9)
END_TXN_VERSIONS = VersionRange(0, 3)
TV2_END_TXN_VERSIONS = VersionRange(5, 5)  # KIP-890 part 2: the epoch is bumped on each end
DESCRIBE_TRANSACTIONS_VERSIONS = VersionRange(0, 0)
HANGING_PRODUCE_VERSIONS = VersionRange(3, 11)  # v11 as the capture's hang-1
# Enable2Pc exists from v6 (KIP-939; Kafka 4.x marks v6 unstable: the broker offers it only with
# unstable.api.versions.enable=true).
TWO_PHASE_INIT_PRODUCER_ID_VERSIONS = VersionRange(6, 6)


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


class RawProducer:
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
        two_phase: bool = False,
    ) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.two_phase = two_phase
        """InitProducerId with Enable2Pc (KIP-939): the coordinator gives the transactions of
        this producer the timeout 2147483647 and never aborts them itself."""
        self._cluster = RawCluster(bootstrap, client_id, timeout_s)
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
            retriable = code in RETRIABLE_COORDINATOR_ERRORS or code == CONCURRENT_TRANSACTIONS
            if not retriable or time.monotonic() > deadline:
                raise KafkaProtocolError(what, code)
            time.sleep(0.02)

    def init_producer_id(self) -> tuple[int, int]:
        result: list[Any] = []

        def send(client: RawKafkaClient) -> int:
            usable = (
                TWO_PHASE_INIT_PRODUCER_ID_VERSIONS if self.two_phase else INIT_PRODUCER_ID_VERSIONS
            )
            version = client.api_version(InitProducerIdRequest.API_KEY, usable)
            extra: dict[str, Any] = {"enable2_pc": True} if self.two_phase else {}
            req = InitProducerIdRequest[version](
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
                **extra,
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

    def end_txn(self, commit: bool, *, transaction_version_2: bool = False) -> None:
        """EndTxn; with `transaction_version_2` as a KIP-890 part 2 client: EndTxn v5, after
        which the coordinator has bumped the epoch (or rotated the producer id once the epoch
        is exhausted) and the next transaction uses what it answered."""
        answer: list[Any] = []

        def send(client: RawKafkaClient) -> int:
            usable = TV2_END_TXN_VERSIONS if transaction_version_2 else END_TXN_VERSIONS
            req = EndTxnRequest[client.api_version(EndTxnRequest.API_KEY, usable)](
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                committed=commit,
            )
            resp = client.request(req)
            answer[:] = [resp]
            return int(resp.error_code)

        self._retry_coordinator(f"EndTxn({self.transactional_id}, commit={commit})", send)
        self._added.clear()
        if transaction_version_2:
            # A new epoch (or producer id) starts its sequences at 0 on every partition.
            self.producer_id = int(answer[0].producer_id)
            self.producer_epoch = int(answer[0].producer_epoch)
            self._sequences.clear()

    def await_markers_written(self) -> None:
        """Return once the coordinator has written the markers of the transaction just ended.

        EndTxn is answered when the coordinator has logged PrepareCommit or PrepareAbort; the
        markers reach the partitions after that, and until then each partition still holds the
        transaction open (docs/kafka-semantics.md#endtxn-returns-before-the-markers). A caller
        that needs the transaction over everywhere waits here for the coordinator's own state
        to leave Prepare*, never for a fixed time. A broker before 3.0 has no
        DescribeTransactions to ask: there it returns at once, as EndTxn did before."""
        if DescribeTransactionsRequest.API_KEY not in self._coordinator().negotiate():
            return

        def send(client: RawKafkaClient) -> int:
            version = client.api_version(
                DescribeTransactionsRequest.API_KEY, DESCRIBE_TRANSACTIONS_VERSIONS
            )
            resp = client.request(
                DescribeTransactionsRequest[version](transactional_ids=[self.transactional_id])
            )
            (state,) = resp.transaction_states
            if state.error_code != NONE:
                return int(state.error_code)
            if state.transaction_state in ("PrepareCommit", "PrepareAbort"):
                return CONCURRENT_TRANSACTIONS  # markers still on their way: ask again
            return NONE

        self._retry_coordinator(f"DescribeTransactions({self.transactional_id})", send)

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

    def __init__(self, producer: RawProducer) -> None:
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

    def commit(self, *, wait_for_markers: bool = True) -> TransactionResult:
        """EndTxn(commit); by default it returns once the markers are written, when the
        transaction is over on every partition it touched. A caller that holds markers back
        (or churns and does not care) passes `wait_for_markers=False`."""
        self._finish()
        self._producer.end_txn(commit=True)
        if wait_for_markers:
            self._producer.await_markers_written()
        result = self._producer.result("committed")
        self._producer.close()
        return result

    def abort(self, *, wait_for_markers: bool = True) -> TransactionResult:
        """EndTxn(abort), waiting for the markers like `commit`."""
        self._finish()
        self._producer.end_txn(commit=False)
        if wait_for_markers:
            self._producer.await_markers_written()
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
    two_phase: bool = False,
) -> OpenTransaction:
    """InitProducerId, then (optionally) AddPartitionsToTxn + Produce per partition; left open.
    `two_phase`: a KIP-939 2PC producer (Enable2Pc), its transaction left prepared.

    `partitions` is a list (each gets `records`) or {partition: records}. Records are an int
    count or (key, value[, CreateTime ms]) tuples; by default one batch per record, as
    kafka-python does when every send is followed by .get().
    """
    producer = RawProducer(
        bootstrap,
        transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        client_id=client_id,
        timeout_s=timeout_s,
        now_ms=now_ms,
        two_phase=two_phase,
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
    *,
    wait_for_markers: bool = True,
    **options: Unpack[WholeTransactionOptions],
) -> TransactionResult:
    """A complete transaction: InitProducerId, AddPartitionsToTxn, Produce, EndTxn(commit),
    by default waiting until its markers are written (`OpenTransaction.commit`)."""
    return _whole_transaction(bootstrap, transactional_id, topic, partitions, options).commit(
        wait_for_markers=wait_for_markers
    )


def aborted_transaction(
    bootstrap: str | Sequence[str],
    transactional_id: str,
    topic: str,
    partitions: Sequence[int] | PartitionRecords = (0,),
    *,
    wait_for_markers: bool = True,
    **options: Unpack[WholeTransactionOptions],
) -> TransactionResult:
    """Like `committed_transaction` but ends with EndTxn(abort)."""
    return _whole_transaction(bootstrap, transactional_id, topic, partitions, options).abort(
        wait_for_markers=wait_for_markers
    )


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
    producer = RawProducer(bootstrap, None, timeout_s=timeout_s, now_ms=now_ms)
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
    producer = RawProducer(
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
            if exc.error_code in (INVALID_TXN_STATE, TRANSACTION_ABORTABLE):
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



def idempotent_producer_write_all(
    cluster: RawCluster,
    topic: str,
    partitions: Sequence[int],
    *,
    timeout_s: float = 30.0,
    now_ms: Callable[[], int] | None = None,
) -> int:
    """One short-lived idempotent producer writing to many partitions at once -> its producer id.

    InitProducerId without a transactional id, then ONE Produce per partition leader carrying
    one one-record batch (sequence 0) for every partition in `partitions`: each partition gets a
    producer state of its own, at the cost of two requests per producer instead of one Produce
    per partition (how the benchmarks seed 1,000 states on 1,000 partitions of a real broker).
    The batch bytes are the same for every partition (same producer, sequence and record), so
    they are built once. `cluster`'s connections are reused across calls.
    """
    deadline = time.monotonic() + timeout_s
    while True:  # a broker just started answers COORDINATOR_LOAD_IN_PROGRESS for a while
        client = cluster.any_client()
        version = client.api_version(InitProducerIdRequest.API_KEY, INIT_PRODUCER_ID_VERSIONS)
        init = client.request(
            InitProducerIdRequest[version](
                transactional_id=None,
                transaction_timeout_ms=60000,
                producer_id=-1,
                producer_epoch=-1,
            )
        )
        if init.error_code == NONE:
            break
        if init.error_code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
            raise KafkaProtocolError("InitProducerId", init.error_code)
        time.sleep(0.05)
    producer_id, epoch = int(init.producer_id), int(init.producer_epoch)
    data, _, _ = build_record_batch(
        [(b"k", f"idem-{producer_id}".encode(), None)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        now_ms=now_ms,
    )
    by_leader: dict[int, tuple[RawKafkaClient, list[int]]] = {}
    for partition in partitions:
        leader = cluster.leader_client(topic, partition)
        by_leader.setdefault(id(leader), (leader, []))[1].append(partition)
    topic_cls = ProduceRequest.TopicProduceData
    part_cls = topic_cls.PartitionProduceData
    for leader, owned in by_leader.values():
        req = ProduceRequest[leader.api_version(ProduceRequest.API_KEY, PRODUCE_VERSIONS)](
            transactional_id=None,
            acks=-1,
            timeout_ms=int(timeout_s * 1000),
            topic_data=[
                topic_cls(
                    name=topic, partition_data=[part_cls(index=p, records=data) for p in owned]
                )
            ],
        )
        resp = leader.request(req)
        for answer in resp.responses:
            for part in answer.partition_responses:
                if part.error_code != NONE:
                    raise KafkaProtocolError(f"Produce({topic}-{part.index})", part.error_code)
    return producer_id
