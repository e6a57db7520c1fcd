"""The transaction coordinator: producer ids, transaction metadata, two-phase commit, timeouts.

Follows Kafka 4.0's `TransactionCoordinator` / `TransactionMetadata` / `TransactionStateManager`
(core/src/main/scala/kafka/coordinator/transaction/). Each transactional id lives in the
`__transaction_state` partition `abs(javaHashCode(id)) % 50`; the broker leading that partition is
its coordinator and the partition's leader epoch is the coordinator epoch written into markers.

Epochs, as the captures of a real 4.0 broker (finalized transaction.version 2) show:
- InitProducerId on a fresh id: epoch 0, state Empty, start time -1 (30).
- EndTxn v0-4 (kafka-python uses v3): no epoch bump; COMMIT keeps epoch 0 (23, 24).
- EndTxn v5+ (transaction.version 2 clients): every EndTxn bumps the epoch by one.
- Timeout abort: fence bump + the server's transaction.version 2 bump = +2 (47, 48, 50).
Markers are written straight into the partition logs (the WriteTxnMarkers a coordinator sends);
a leader that is dead or marker-blocked keeps the transaction in Prepare* until tick() retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from kafka_sim.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    TRANSACTION_COORDINATOR_FENCED,
    TRANSACTIONAL_ID_NOT_FOUND,
)
from kafka_sim.jvm_order import (
    java_hash_map_order,
    java_string_hash,
    scala_mutable_hash_order,
    topic_partition_hash,
)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767
PRODUCER_ID_BLOCK_SIZE = 1000  # ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


class TxnState(StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"


def java_abs(n: int) -> int:
    """org.apache.kafka.common.utils.Utils.abs: Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """Utils.abs(key.hashCode) % partitions: a transactional id's __transaction_state partition."""
    return java_abs(java_string_hash(key)) % num_partitions


class CoordinatorCluster(Protocol):
    """What the coordinator needs from the cluster (implemented by state.ClusterState)."""

    def now_ms(self) -> int: ...

    def txn_state_partition_leader(self, partition: int) -> tuple[int, int] | None:
        """(leader broker id, leader epoch) of a __transaction_state partition, None if absent."""
        ...

    def write_txn_marker(
        self, topic: str, partition: int, *, producer_id: int, producer_epoch: int, commit: bool,
        coordinator_epoch: int, transaction_version: int,
    ) -> int | None:
        """Append a marker at the partition's leader: error code, or None if undeliverable now."""
        ...

    def partition_exists(self, topic: str, partition: int) -> bool: ...


class TransactionMetadata:
    __slots__ = (
        "client_transaction_version",
        "coordinator_epoch_for_markers",
        "last_producer_epoch",
        "next_producer_id",
        "pending_markers",
        "previous_producer_id",
        "producer_epoch",
        "producer_id",
        "state",
        "topic_partitions",
        "transactional_id",
        "txn_last_update_timestamp",
        "txn_start_timestamp",
        "txn_timeout_ms",
    )

    def __init__(self, transactional_id: str, producer_id: int, txn_timeout_ms: int,
                 now_ms: int) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = NO_PRODUCER_ID
        self.next_producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.txn_timeout_ms = txn_timeout_ms
        self.state = TxnState.EMPTY
        self.topic_partitions: dict[tuple[str, int], None] = {}
        self.txn_start_timestamp = -1
        self.txn_last_update_timestamp = now_ms
        self.client_transaction_version = 0
        self.pending_markers: dict[tuple[str, int], None] | None = None
        self.coordinator_epoch_for_markers = 0

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= SHORT_MAX - 1

    def ordered_partitions(self) -> list[tuple[str, int]]:
        """Iteration order of Kafka's mutable.Set[TopicPartition] (Scala HashSet)."""
        return scala_mutable_hash_order(list(self.topic_partitions), topic_partition_hash)


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(slots=True)
class ListResult:
    error_code: int
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[ListedTransaction] = field(default_factory=list)


class ProducerIdManager:
    """Per-broker blocks of 1000 ids handed out by the controller in request order (KIP-730)."""

    __slots__ = ("_blocks", "_next_block_start")

    def __init__(self) -> None:
        self._next_block_start = 0
        self._blocks: dict[int, list[int]] = {}  # broker -> [next id, block end (exclusive)]

    def generate(self, broker_id: int) -> int:
        block = self._blocks.get(broker_id)
        if block is None or block[0] >= block[1]:
            start = self._next_block_start
            self._next_block_start += PRODUCER_ID_BLOCK_SIZE
            block = self._blocks[broker_id] = [start, start + PRODUCER_ID_BLOCK_SIZE]
        pid = block[0]
        block[0] += 1
        return pid

    def generate_many(self, broker_id: int, count: int) -> list[range]:
        """The ids `count` calls of `generate(broker_id)` return, as runs of consecutive ids
        (a new run where a block runs out), without a call per id (seed.py)."""
        runs: list[range] = []
        while count > 0:
            block = self._blocks.get(broker_id)
            if block is None or block[0] >= block[1]:
                self.generate(broker_id)  # takes the next block, as the next call would
                block = self._blocks[broker_id]
                block[0] -= 1
            take = min(count, block[1] - block[0])
            if runs and runs[-1].stop == block[0]:
                runs[-1] = range(runs[-1].start, block[0] + take)
            else:
                runs.append(range(block[0], block[0] + take))
            block[0] += take
            count -= take
        return runs


class TransactionCoordinator:
    """All brokers' coordinator state; each request names the broker it reached."""

    def __init__(self, cluster: CoordinatorCluster, *, num_partitions: int,
                 server_transaction_version: int,
                 timeout_abort_fences_under_tv2: bool = True) -> None:
        self._cluster = cluster
        self.num_partitions = num_partitions
        self.server_transaction_version = server_transaction_version
        self.timeout_abort_fences_under_tv2 = timeout_abort_fences_under_tv2
        self.producer_ids = ProducerIdManager()
        # __transaction_state partition -> transactional id -> metadata (insertion order kept)
        self._metadata: dict[int, dict[str, TransactionMetadata]] = {}
        self._pending: dict[str, TransactionMetadata] = {}  # ids in Prepare* with markers to send
        self.loading_partitions: set[int] = set()

    # -- lookup ----------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def coordinator_for(self, transactional_id: str) -> tuple[int, int] | None:
        """(broker id, coordinator epoch) or None when __transaction_state does not exist."""
        return self._cluster.txn_state_partition_leader(self.partition_for(transactional_id))

    def _owned(self, broker_id: int, transactional_id: str) -> tuple[int, int] | int:
        """(txn partition, coordinator epoch) when `broker_id` coordinates the id, else an error."""
        p = self.partition_for(transactional_id)
        leader = self._cluster.txn_state_partition_leader(p)
        if leader is None or leader[0] != broker_id:
            return NOT_COORDINATOR
        if p in self.loading_partitions:
            return 14  # COORDINATOR_LOAD_IN_PROGRESS
        return p, leader[1]

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self._metadata.get(self.partition_for(transactional_id), {}).get(transactional_id)

    def all_metadata(self) -> Iterable[TransactionMetadata]:
        for p in sorted(self._metadata):
            yield from self._metadata[p].values()

    def put(self, md: TransactionMetadata) -> None:
        self._metadata.setdefault(self.partition_for(md.transactional_id), {})[
            md.transactional_id] = md

    # -- InitProducerId --------------------------------------------------------------------
    def init_producer_id(
        self, broker_id: int, transactional_id: str | None, transaction_timeout_ms: int, *,
        max_timeout_ms: int, expected_producer_id: int = NO_PRODUCER_ID,
        expected_producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        if transactional_id is None:
            return InitProducerIdResult(NONE, self.producer_ids.generate(broker_id), 0)
        if transactional_id == "":
            return InitProducerIdResult(INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= max_timeout_ms:
            return InitProducerIdResult(INVALID_TRANSACTION_TIMEOUT)
        owned = self._owned(broker_id, transactional_id)
        if isinstance(owned, int):
            return InitProducerIdResult(owned)
        now = self._cluster.now_ms()
        md = self.get(transactional_id)
        if md is None:
            md = TransactionMetadata(transactional_id, self.producer_ids.generate(broker_id),
                                     transaction_timeout_ms, now)
            self.put(md)
        expected = (None if expected_producer_id == NO_PRODUCER_ID
                    else (expected_producer_id, expected_producer_epoch))
        if expected is not None and not (
            md.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == md.producer_id
            or (expected[0] == md.previous_producer_id and expected[1] >= SHORT_MAX - 1)
        ):
            return InitProducerIdResult(PRODUCER_FENCED)
        if md.state in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT):
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
        if md.state == TxnState.ONGOING:
            # Fence the current producer and abort its transaction; the client retries.
            self._abort_not_from_client(md, owned[1])
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
        # Empty / CompleteCommit / CompleteAbort
        if md.is_producer_epoch_exhausted and (
                expected is None or expected[1] == md.producer_epoch):
            md.previous_producer_id = md.producer_id
            md.producer_id = self.producer_ids.generate(broker_id)
            md.producer_epoch = 0
            md.last_producer_epoch = NO_PRODUCER_EPOCH
        else:
            bumped = md.producer_epoch + 1
            if expected is None:
                md.producer_epoch, md.last_producer_epoch = bumped, NO_PRODUCER_EPOCH
            elif md.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == md.producer_epoch:
                md.producer_epoch, md.last_producer_epoch = bumped, md.producer_epoch
            elif expected[1] == md.last_producer_epoch:
                pass  # a retry of a bump whose answer was lost
            else:
                return InitProducerIdResult(PRODUCER_FENCED)
        md.state = TxnState.EMPTY
        md.txn_timeout_ms = transaction_timeout_ms
        md.topic_partitions = {}
        md.txn_start_timestamp = -1
        md.txn_last_update_timestamp = now
        return InitProducerIdResult(NONE, md.producer_id, md.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    def add_partitions(
        self, broker_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Sequence[tuple[str, int]], *, client_transaction_version: int = 0,
    ) -> int:
        owned = self._owned(broker_id, transactional_id)
        if isinstance(owned, int):
            return owned
        md = self.get(transactional_id)
        if md is None:
            return INVALID_PRODUCER_ID_MAPPING
        if md.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS
        if md.state == TxnState.ONGOING and all(tp in md.topic_partitions for tp in partitions):
            return NONE
        now = self._cluster.now_ms()
        if md.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT):
            md.txn_start_timestamp = now
        for tp in partitions:
            md.topic_partitions[tp] = None
        md.state = TxnState.ONGOING
        md.txn_last_update_timestamp = now
        md.client_transaction_version = client_transaction_version
        return NONE

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         tp: tuple[str, int]) -> int:
        """Produce-time verification (AddPartitionsToTxn verifyOnly, KIP-890 part 1)."""
        coordinator = self.coordinator_for(transactional_id)
        if coordinator is None:
            return NOT_COORDINATOR
        md = self.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if md.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        if md.state != TxnState.ONGOING or tp not in md.topic_partitions:
            return INVALID_TXN_STATE
        return NONE

    # -- EndTxn ----------------------------------------------------------------------------
    def end_txn(
        self, broker_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
        commit: bool, *, client_transaction_version: int,
    ) -> EndTxnResult:
        if not transactional_id:
            return EndTxnResult(INVALID_REQUEST)
        owned = self._owned(broker_id, transactional_id)
        if isinstance(owned, int):
            return EndTxnResult(owned)
        md = self.get(transactional_id)
        if md is None:
            return EndTxnResult(INVALID_PRODUCER_ID_MAPPING)
        if client_transaction_version >= 2:
            err = self._end_txn_v2(md, producer_id, producer_epoch, commit, owned[1])
        else:
            err = self._end_txn_v1(md, producer_id, producer_epoch, commit, owned[1])
        return EndTxnResult(err, md.producer_id, md.producer_epoch)

    def _end_txn_v1(self, md: TransactionMetadata, producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> int:
        """TransactionCoordinator.endTransactionWithTV1 for a client request."""
        if md.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != md.producer_epoch:
            return PRODUCER_FENCED
        state = md.state
        if state == TxnState.ONGOING:
            self._prepare(md, commit, bump_epoch=False, coordinator_epoch=coordinator_epoch,
                          transaction_version=0, no_partition_added=False)
            return NONE
        if state == TxnState.COMPLETE_COMMIT:
            return NONE if commit else INVALID_TXN_STATE
        if state == TxnState.COMPLETE_ABORT:
            return INVALID_TXN_STATE if commit else NONE
        if state == TxnState.PREPARE_COMMIT:
            return CONCURRENT_TRANSACTIONS if commit else INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return INVALID_TXN_STATE if commit else CONCURRENT_TRANSACTIONS
        return INVALID_TXN_STATE  # Empty

    def _end_txn_v2(self, md: TransactionMetadata, producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> int:
        """TransactionCoordinator.endTransaction (transaction.version 2) for a client request."""
        retry_on_epoch_bump = md.producer_epoch == producer_epoch + 1
        retry_on_overflow = (md.previous_producer_id == producer_id
                             and producer_epoch == SHORT_MAX - 1 and md.producer_epoch == 0)
        state = md.state
        if state in (TxnState.ONGOING, TxnState.EMPTY):
            valid_epoch = producer_epoch == md.producer_epoch
        elif state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_epoch_bump
        else:
            valid_epoch = (retry_on_epoch_bump or retry_on_overflow
                           or producer_epoch == md.producer_epoch)
        is_retry = retry_on_epoch_bump or retry_on_overflow
        if md.producer_id != producer_id and not retry_on_overflow:
            return INVALID_PRODUCER_ID_MAPPING
        if not valid_epoch:
            return PRODUCER_FENCED

        def prepare(result_commit: bool, no_partition_added: bool) -> int:
            self._prepare(md, result_commit, bump_epoch=True, coordinator_epoch=coordinator_epoch,
                          transaction_version=2, no_partition_added=no_partition_added)
            return NONE

        if state == TxnState.ONGOING:
            return prepare(commit, False)
        if state == TxnState.COMPLETE_COMMIT:
            if commit:
                return NONE if is_retry else INVALID_TXN_STATE
            return INVALID_TXN_STATE if is_retry else prepare(False, True)
        if state == TxnState.COMPLETE_ABORT:
            if not commit:
                return NONE if is_retry else prepare(False, True)
            return INVALID_TXN_STATE
        if state == TxnState.PREPARE_COMMIT:
            return CONCURRENT_TRANSACTIONS if commit else INVALID_TXN_STATE
        if state == TxnState.PREPARE_ABORT:
            return INVALID_TXN_STATE if commit else CONCURRENT_TRANSACTIONS
        if state == TxnState.EMPTY:
            return INVALID_TXN_STATE if commit else prepare(False, True)
        return INVALID_TXN_STATE

    def _abort_not_from_client(self, md: TransactionMetadata, coordinator_epoch: int) -> None:
        """prepareFenceProducerEpoch + endTransaction(ABORT, isFromClient=false).

        The abort uses the server's transaction.version ("not from client, use server TV"), so
        under transaction.version 2 a 4.0.0 broker raises the epoch twice (captures 47, 48:
        0 -> 2); live 4.0.2 and 4.4.0 brokers only once, the abort's own bump (0 -> 1,
        tests/realkafka/test_live_conformance.py): `timeout_abort_fences_under_tv2` False.
        """
        tv = self.server_transaction_version
        if md.producer_epoch < SHORT_MAX and (tv < 2 or self.timeout_abort_fences_under_tv2):
            md.producer_epoch += 1  # fence
        md.last_producer_epoch = NO_PRODUCER_EPOCH
        self._prepare(md, False, bump_epoch=tv >= 2, coordinator_epoch=coordinator_epoch,
                      transaction_version=tv, no_partition_added=False)

    def _prepare(self, md: TransactionMetadata, commit: bool, *, bump_epoch: bool,
                 coordinator_epoch: int, transaction_version: int,
                 no_partition_added: bool) -> None:
        """prepareAbortOrCommit, then send markers to every partition in the transaction."""
        now = self._cluster.now_ms()
        if bump_epoch:
            if md.is_producer_epoch_exhausted:
                md.next_producer_id = self.producer_ids.generate(
                    self.coordinator_for(md.transactional_id)[0]  # type: ignore[index]
                )
            md.last_producer_epoch = md.producer_epoch
            md.producer_epoch += 1
        if no_partition_added:
            md.txn_start_timestamp = now
        md.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        md.txn_last_update_timestamp = now
        md.client_transaction_version = transaction_version
        md.coordinator_epoch_for_markers = coordinator_epoch
        md.pending_markers = dict.fromkeys(md.topic_partitions)
        self._pending[md.transactional_id] = md
        self._send_markers(md)

    def _send_markers(self, md: TransactionMetadata) -> None:
        pending = md.pending_markers
        if pending is None:
            return
        commit = md.state == TxnState.PREPARE_COMMIT
        # Markers carry the coordinator epoch of whoever coordinates the id now.
        coordinator = self.coordinator_for(md.transactional_id)
        if coordinator is None:
            return
        for tp in list(pending):
            if not self._cluster.partition_exists(*tp):
                # Partition gone: Kafka drops the marker (leader unknown, likely deleted).
                del pending[tp]
                md.topic_partitions.pop(tp, None)
                continue
            err = self._cluster.write_txn_marker(
                tp[0], tp[1], producer_id=md.producer_id, producer_epoch=md.producer_epoch,
                commit=commit, coordinator_epoch=coordinator[1],
                transaction_version=md.client_transaction_version,
            )
            if err is None:
                continue  # leader unavailable or blocked: retried by tick()
            if err == NONE:
                del pending[tp]
                md.topic_partitions.pop(tp, None)
            elif err in (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED):
                # TransactionMarkerRequestCompletionHandler: abortSending; stays Prepare*.
                md.pending_markers = None
                self._pending.pop(md.transactional_id, None)
                return
        if not pending:
            self._complete(md)

    def _complete(self, md: TransactionMetadata) -> None:
        md.state = (TxnState.COMPLETE_COMMIT if md.state == TxnState.PREPARE_COMMIT
                    else TxnState.COMPLETE_ABORT)
        md.topic_partitions = {}
        md.pending_markers = None
        md.txn_last_update_timestamp = self._cluster.now_ms()
        if md.next_producer_id != NO_PRODUCER_ID:
            md.previous_producer_id = md.producer_id
            md.producer_id = md.next_producer_id
            md.next_producer_id = NO_PRODUCER_ID
            md.producer_epoch = 0
            md.last_producer_epoch = NO_PRODUCER_EPOCH
        self._pending.pop(md.transactional_id, None)

    def register_pending(self, md: TransactionMetadata) -> None:
        """Track a Prepare* transaction whose markers are still to be delivered (seed.py)."""
        self._pending[md.transactional_id] = md

    def retry_markers(self) -> None:
        for md in list(self._pending.values()):
            self._send_markers(md)

    # -- timeouts --------------------------------------------------------------------------
    def abort_timed_out_transactions(self) -> list[str]:
        """TransactionStateManager.timedOutTransactions: Ongoing and start + timeout < now,
        skipping two-phase-commit transactions (timeout Integer.MAX_VALUE, KIP-939)."""
        now = self._cluster.now_ms()
        aborted: list[str] = []
        for md in list(self.all_metadata()):
            if md.state != TxnState.ONGOING or md.pending_markers is not None:
                continue
            if md.txn_timeout_ms == 2_147_483_647:  # isDistributedTwoPhaseCommitTxn
                continue
            if md.txn_start_timestamp + md.txn_timeout_ms < now:
                coordinator = self.coordinator_for(md.transactional_id)
                if coordinator is None:
                    continue
                self._abort_not_from_client(md, coordinator[1])
                aborted.append(md.transactional_id)
        return aborted

    # -- admin -----------------------------------------------------------------------------
    def describe(self, broker_id: int, transactional_id: str
                 ) -> tuple[int, TransactionMetadata | None]:
        if not transactional_id:
            return INVALID_REQUEST, None
        owned = self._owned(broker_id, transactional_id)
        if isinstance(owned, int):
            return owned, None
        md = self.get(transactional_id)
        if md is None or md.state == TxnState.DEAD:
            return TRANSACTIONAL_ID_NOT_FOUND, None
        return NONE, md

    def list_transactions(
        self, broker_id: int, *, state_filters: Sequence[str], producer_id_filters: Sequence[int],
        duration_filter_ms: int = -1, transactional_id_pattern: str | None = None,
    ) -> ListResult:
        """TransactionStateManager.listTransactionStates for the partitions `broker_id` leads."""
        owned = [p for p in range(self.num_partitions)
                 if (leader := self._cluster.txn_state_partition_leader(p)) is not None
                 and leader[0] == broker_id]
        if any(p in self.loading_partitions for p in owned):
            return ListResult(14)  # COORDINATOR_LOAD_IN_PROGRESS
        result = ListResult(NONE)
        known = {s.value for s in TxnState}
        states: set[str] = set()
        for name in state_filters:
            if name in known:
                states.add(name)
            else:
                result.unknown_state_filters.append(name)
        if state_filters and not states:
            return result  # only unknown states asked for: nothing matches (capture 39)
        pattern = None
        if transactional_id_pattern is not None:
            try:
                pattern = re.compile(transactional_id_pattern)
            except re.error:
                return ListResult(INVALID_REQUEST)
        pids = set(producer_id_filters)
        now = self._cluster.now_ms()
        for p in owned:
            by_id = self._metadata.get(p)
            if not by_id:
                continue
            # Kafka's Pool is a ConcurrentHashMap keyed by transactional id.
            ordered = java_hash_map_order(list(by_id.values()),
                                          lambda m: java_string_hash(m.transactional_id),
                                          concurrent=True)
            for md in ordered:
                if md.state == TxnState.DEAD:
                    continue
                if pids and md.producer_id not in pids:
                    continue
                if states and md.state.value not in states:
                    continue
                if duration_filter_ms >= 0 and now - md.txn_start_timestamp <= duration_filter_ms:
                    continue
                if pattern is not None and not pattern.fullmatch(md.transactional_id):
                    continue
                result.transactions.append(
                    ListedTransaction(md.transactional_id, md.producer_id, md.state.value))
        return result
