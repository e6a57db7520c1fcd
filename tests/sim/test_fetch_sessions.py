"""The simulator's fetch sessions (KIP-227), fast and without a JVM: what the real-broker script
(tests/realkafka/test_real_fetch_session.py) cannot reach cheaply: a full session cache, stale
and size-based eviction, the epoch wrap, a restart, and the session order after records
(docs/kafka-semantics.md#fetch-sessions)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_sim.api import RequestContext
from kafka_sim.clock import ManualClock
from kafka_sim.fetch_sessions import (
    FINAL_EPOCH,
    INT32_MAX,
    MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
    FetchSessionCache,
    next_epoch,
)
from kafka_sim.router import BrokerRouter
from kafka_sim.state import ClusterState

T0 = 1_800_000_000_000
READ_COMMITTED = 1


class Broker:
    """One simulated broker on a manual clock, spoken to at Fetch v12 (topic names)."""

    def __init__(self, **config: str) -> None:
        self.clock = ManualClock(T0)
        self.state = ClusterState([1], self.clock, broker_config=config or None)
        self.router = BrokerRouter(self.state)

    def call(self, api_key: int, version: int, request: Any) -> Any:
        return self.router.handle(RequestContext(1, api_key, version, 1, "t", "User:ANONYMOUS"),
                                  request)

    def write(self, topic: str, partition: int, records: int = 1) -> None:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for i in range(records):
            builder.append(i, timestamp=T0, key=b"k", value=b"v", headers=[])
        P = ProduceRequest.TopicProduceData
        resp = self.call(0, 9, ProduceRequest(
            version=9, transactional_id=None, acks=-1, timeout_ms=1000,
            topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(
                index=partition, records=bytes(builder.build()))])]))
        assert resp.responses[0].partition_responses[0].error_code == 0

    def fetch(self, session_id: int, epoch: int, reads: Sequence[tuple[str, int, int]] = (),
              forget: Sequence[tuple[str, int]] = (), version: int = 12) -> Any:
        F = FetchRequest.FetchTopic
        topics: dict[str, list[Any]] = {}
        for topic, partition, offset in reads:
            topics.setdefault(topic, []).append(F.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=0))
        forgotten: dict[str, list[int]] = {}
        for topic, partition in forget:
            forgotten.setdefault(topic, []).append(partition)
        ids = {name: t.topic_id for name, t in self.state.topics.items()}
        return self.call(1, version, FetchRequest(
            version=version, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=0,
            isolation_level=READ_COMMITTED, session_id=session_id, session_epoch=epoch,
            topics=[F(topic=t, topic_id=ids[t], partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, topic_id=ids[t],
                                                                partitions=ps)
                                   for t, ps in forgotten.items()],
            rack_id=""))


def answered(resp: Any) -> list[tuple[str, int, int, bool]]:
    """(topic, partition, high watermark, has records) in answer order."""
    return [(t.topic, p.partition_index, p.high_watermark, bool(p.records))
            for t in resp.responses for p in t.partitions]


def test_an_incremental_fetch_answers_only_what_changed_and_moves_readers_to_the_end() -> None:
    b = Broker()
    b.state.create_topic("t", 3)
    full = b.fetch(0, 0, [("t", 0, 0), ("t", 1, 0), ("t", 2, 0)])
    sid = full.session_id
    assert sid != 0 and answered(full) == [("t", 0, 0, False), ("t", 1, 0, False),
                                           ("t", 2, 0, False)]
    assert answered(b.fetch(sid, 1)) == []
    b.write("t", 0)
    b.write("t", 2)
    # Both moved; with partition_max_bytes 0 only the first gets its one batch (KIP-74).
    assert answered(b.fetch(sid, 2)) == [("t", 0, 1, True), ("t", 2, 1, False)]
    # t-0 had records: it went to the end of the session, so t-2 is read first now.
    assert answered(b.fetch(sid, 3)) == [("t", 2, 1, True)]
    assert answered(b.fetch(sid, 4)) == [("t", 0, 1, True)]
    assert answered(b.fetch(sid, 5, [("t", 0, 1), ("t", 2, 1)])) == []
    assert b.fetch(sid, 5).error_code == 71  # that epoch is used up
    assert b.fetch(sid, 6).error_code == 0  # the error did not close the session


def test_forgetting_every_partition_closes_the_session() -> None:
    b = Broker()
    b.state.create_topic("t", 1)
    sid = b.fetch(0, 0, [("t", 0, 0)]).session_id
    last = b.fetch(sid, 1, forget=[("t", 0)])
    assert (last.error_code, last.session_id, answered(last)) == (0, 0, [])
    assert b.fetch(sid, 2).error_code == 70


def test_a_session_answers_only_at_its_own_kind_of_version() -> None:
    b = Broker()
    b.state.create_topic("t", 1)
    sid = b.fetch(0, 0, [("t", 0, 0)], version=13).session_id
    assert b.fetch(sid, 1, version=12).error_code == 106  # FETCH_SESSION_TOPIC_ID_ERROR
    assert b.fetch(sid, 1, version=13).error_code == 0


def test_a_full_cache_answers_session_id_0_until_a_stale_session_is_evicted() -> None:
    # 8 slots: one per shard; new sessions go to the shards in turn.
    b = Broker(**{"max.incremental.fetch.session.cache.slots": "8"})
    b.state.create_topic("t", 1)
    ids = [b.fetch(0, 0, [("t", 0, 0)]).session_id for _ in range(8)]
    assert 0 not in ids and len(set(ids)) == 8
    assert b.fetch(0, 0, [("t", 0, 0)]).session_id == 0  # that shard is full
    b.clock.advance(MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS + 1)
    for sid in ids[2:]:  # every shard but the ones of ids[0], ids[1] used again
        assert b.fetch(sid, 1).error_code == 0
    # The next two attempts go to the shards of ids[1] and ids[2] (the counter went on):
    # ids[1] is stale and evicted; ids[2] was just used and stays.
    assert b.fetch(0, 0, [("t", 0, 0)]).session_id != 0
    assert b.fetch(ids[1], 1).error_code == 70
    assert b.fetch(0, 0, [("t", 0, 0)]).session_id == 0
    assert b.fetch(ids[2], 2).error_code == 0


def test_a_bigger_session_evicts_a_smaller_one_once_it_is_old_enough() -> None:
    b = Broker(**{"max.incremental.fetch.session.cache.slots": "8"})
    b.state.create_topic("t", 2)
    small = [b.fetch(0, 0, [("t", 0, 0)]).session_id for _ in range(8)]
    b.clock.advance(MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS + 1)
    for sid in small:  # used again: not stale, but now older than the eviction time
        assert b.fetch(sid, 1).error_code == 0
    # Same size: not worth more, not created. Bigger: evicts the shard's smaller session.
    assert b.fetch(0, 0, [("t", 0, 0)]).session_id == 0
    big = b.fetch(0, 0, [("t", 0, 0), ("t", 1, 0)]).session_id
    assert big != 0
    assert b.fetch(small[1], 2).error_code == 70
    assert b.state.fetch_session_cache(1).session(big) is not None


def test_no_slots_no_sessions_and_a_restart_forgets_them() -> None:
    b = Broker(**{"max.incremental.fetch.session.cache.slots": "7"})  # 7 // 8 = 0 per shard
    b.state.create_topic("t", 1)
    assert b.fetch(0, 0, [("t", 0, 0)]).session_id == 0
    b2 = Broker()
    b2.state.create_topic("t", 1)
    sid = b2.fetch(0, 0, [("t", 0, 0)]).session_id
    b2.state.drop_fetch_sessions(1)
    assert b2.fetch(sid, 1).error_code == 70


def test_epochs_wrap_as_kafka_does() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    cache = FetchSessionCache(1000, rng=random.Random(1))
    created = cache.next_shard().maybe_create_session(
        0, False, 0, False, lambda: {})
    session = cache.session(created)
    assert session is not None and session.epoch == 1
    # Session ids of shard n lie in [max(1, n * range), (n + 1) * range).
    for n, shard in enumerate(cache.shards):
        sid = shard.new_session_id()
        assert max(1, n * shard.id_range) <= sid < (n + 1) * shard.id_range
        assert cache.shard_for(sid) is shard
    assert cache.shard_for(INT32_MAX) is None
    assert cache.shard_for(-5) is cache.shards[0]
