"""Idle idempotent producer states held compactly: `seed_idle_producer_states` must
leave a cluster that answers every API byte for byte as `seed_producer_states` (one
ProducerStateEntry and one seeded batch per state) does. Two SimClusters are seeded the same
way, one explicitly and one compactly, from the same random seed, and asked the same requests
over TCP: DescribeProducers, ListOffsets (latest, committed, earliest, max timestamp, by
timestamp), Fetch across the seeded ranges, Produce by a seeded producer id (its next sequence,
a duplicate, an out-of-order one); then their clocks are moved past `producer.id.expiration.ms`
in steps, and the answers compared again after each expiration check."""

from __future__ import annotations

import itertools
import random
import time
import tracemalloc
import uuid
from array import array
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_sim.client import RawKafkaClient
from kafka_sim.clock import ManualClock
from kafka_sim.cluster import SimCluster
from kafka_sim.log import IdleProducerBlock, PartitionLog
from kafka_sim.seed import (
    _draw_below,
    seed_idempotent_producer,
    seed_idle_producer_states,
    seed_open_transaction,
    seed_producer_states,
    write_idempotent_batch,
)
from kafka_sim.state import ClusterState

TOPIC = "t"
LAT_TOPIC = "lat"  # message.timestamp.type=LogAppendTime
PARTITIONS = 6
TOPIC_IDS = {TOPIC: uuid.UUID(int=1), LAT_TOPIC: uuid.UUID(int=2)}
EXPIRATION_MS = 1_200_000
MAX_AGE_MS = 1_500_000
CHECK_MS = 600_000  # PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS
# Producer states per partition, seeded in this order (2500: ids from several 1000-id blocks
# of the leader, interleaved with other brokers' blocks).
PLAN = [(TOPIC, 0, 2500), (TOPIC, 1, 1), (TOPIC, 2, 37), (TOPIC, 3, 50), (TOPIC, 5, 300),
        (LAT_TOPIC, 0, 40), (TOPIC, 2, 20)]

Seeder = Callable[..., list[int]]


def explicit(state: ClusterState, topic: str, p: int, n: int, **kw: Any) -> list[int]:
    return seed_producer_states(state, topic, p, n, **kw)


def compact(state: ClusterState, topic: str, p: int, n: int, **kw: Any) -> list[int]:
    return list(itertools.chain.from_iterable(seed_idle_producer_states(state, topic, p, n,
                                                                        **kw)))


def build(state: ClusterState, seeder: Seeder, now: int) -> dict[str, Any]:
    """The same seeding, explicit or compact: states, then explicit producers and a
    transaction on top of them, and writes by seeded ids (their states continue)."""
    state.create_topic(TOPIC, PARTITIONS, topic_id=TOPIC_IDS[TOPIC])
    state.create_topic(LAT_TOPIC, 1, topic_id=TOPIC_IDS[LAT_TOPIC],
                       configs={"message.timestamp.type": "LogAppendTime"})
    rng = random.Random(28)
    before = seed_idempotent_producer(state, TOPIC, 3, timestamp_ms=now - 5)  # explicit first
    ids = {(t, p): seeder(state, t, p, n, now_ms=now, max_age_ms=MAX_AGE_MS, rng=rng)
           for t, p, n in PLAN}
    txn = seed_open_transaction(state, "open", [(TOPIC, 3), (TOPIC, 0)], start_ms=now - 1000,
                                timeout_ms=3_600_000)
    write_idempotent_batch(state, TOPIC, 5, producer_id=ids[(TOPIC, 5)][7], timestamp_ms=now)
    write_idempotent_batch(state, TOPIC, 3, producer_id=before, timestamp_ms=now)
    after = seed_idempotent_producer(state, TOPIC, 2, timestamp_ms=now - 2)
    return {"ids": ids, "rng": rng.random(), "txn": txn.producer_id, "after": after,
            "next_pid": state.coordinator.producer_ids.generate(1)}


@contextmanager
def seeded(seeder: Seeder, t0: int) -> Iterator[tuple[SimCluster, dict[str, Any]]]:
    config = {"producer.id.expiration.ms": str(EXPIRATION_MS),
              "transaction.max.timeout.ms": "3600000"}
    with SimCluster(brokers=3, broker_config=config) as sim:
        sim.call(setattr, sim.state, "clock", ManualClock(t0))
        yield sim, sim.call(build, sim.state, seeder, t0)


class Asker:
    """Raw requests to each broker of one cluster; answers as bytes (correlation id fixed)."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.clients = {n: RawKafkaClient(*sim.endpoints[n]) for n in sim.node_ids}

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    def leader(self, topic: str, p: int) -> int:
        return int(self.sim.call(lambda: self.sim.state.partition(topic, p).leader_id))

    def ask(self, broker: int, request: Any) -> bytes:
        client = self.clients[broker]
        return client.exchange_raw(client.encode_request(request, correlation_id=7))

    def describe_producers(self) -> list[bytes]:
        T = DescribeProducersRequest.TopicRequest
        return [self.ask(b, DescribeProducersRequest(version=0, topics=[
            T(name=TOPIC, partition_indexes=list(range(PARTITIONS))),
            T(name=LAT_TOPIC, partition_indexes=[0])])) for b in sorted(self.clients)]

    def list_offsets(self, topic: str, p: int, timestamp: int, isolation: int) -> bytes:
        T = ListOffsetsRequest.ListOffsetsTopic
        return self.ask(self.leader(topic, p), ListOffsetsRequest(
            version=9, replica_id=-1, isolation_level=isolation, topics=[T(
                name=topic, partitions=[T.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=-1, timestamp=timestamp)])]))

    def fetch(self, topic: str, p: int, offset: int, max_bytes: int, isolation: int) -> bytes:
        F = FetchRequest.FetchTopic
        return self.ask(self.leader(topic, p), FetchRequest(
            version=17, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
            isolation_level=isolation, session_id=0, session_epoch=-1,
            topics=[F(topic_id=TOPIC_IDS[topic], partitions=[F.FetchPartition(
                partition=p, fetch_offset=offset, partition_max_bytes=max_bytes)])],
            forgotten_topics_data=[], rack_id=""))

    def produce(self, topic: str, p: int, pid: int, seq: int, ts: int) -> bytes:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=pid, producer_epoch=0,
                                            base_sequence=seq, batch_size=1 << 20)
        builder.append(0, timestamp=ts, key=None, value=b"again", headers=[])
        Topic = ProduceRequest.TopicProduceData
        return self.ask(self.leader(topic, p), ProduceRequest(
            version=9, transactional_id=None, acks=-1, timeout_ms=1000,
            topic_data=[Topic(name=topic, partition_data=[Topic.PartitionProduceData(
                index=p, records=bytes(builder.build()))])]))


def answers(a: Asker, now: int) -> dict[str, bytes]:
    """Every read answer that the seeded states or their batches show in."""
    out = {f"describe-{i}": body for i, body in enumerate(a.describe_producers())}
    ends = a.sim.call(lambda: {(t, p): a.sim.state.partition(t, p).log.high_watermark
                               for t, p, _ in PLAN})
    for (topic, p), end in ends.items():
        for iso in (0, 1):
            for target in (-1, -2, -3, now - MAX_AGE_MS // 2, now - 10, now + 1):
                out[f"offsets-{topic}-{p}-{target}-{iso}"] = a.list_offsets(topic, p, target, iso)
            for offset in sorted({0, 1, end // 3, end // 2, end - 2, end - 1, end}):
                for max_bytes in (1, 300, 1 << 20):
                    key = f"fetch-{topic}-{p}-{offset}-{max_bytes}-{iso}"
                    out[key] = a.fetch(topic, p, max(0, offset), max_bytes, iso)
    return out


def compare(mine: dict[str, bytes], theirs: dict[str, bytes]) -> None:
    assert mine.keys() == theirs.keys()
    differing = [k for k in mine if mine[k] != theirs[k]]
    assert not differing, differing[:10]


def state_counts(sim: SimCluster) -> dict[tuple[str, int], int]:
    return dict(sim.call(lambda: {(t, p.index): p.log.producer_state_count()
                                  for t in (TOPIC, LAT_TOPIC)
                                  for p in sim.state.topics[t].partitions
                                  if p.log is not None}))


def test_compact_seeding_answers_as_the_explicit_one() -> None:
    # Both clusters' expiration checks fall 10 minutes apart from ~5 minutes before t0 (their
    # start, on the wall clock): the steps below land ~5 minutes clear of every check.
    t0 = (time.time_ns() // 1_000_000) + CHECK_MS // 2
    with ExitStack() as stack:
        ex, seeding = stack.enter_context(seeded(explicit, t0))
        co, compact_seeding = stack.enter_context(seeded(compact, t0))
        assert seeding == compact_seeding  # same ids, same rng state after, same allocator
        blocks = co.call(lambda: sum(len(p.log.idle_blocks or ()) for t in (TOPIC, LAT_TOPIC)
                                     for p in co.state.topics[t].partitions
                                     if p.log is not None))
        assert blocks == len(PLAN)
        a, b = Asker(ex), Asker(co)
        stack.callback(a.close)
        stack.callback(b.close)
        first = answers(a, t0)
        compare(first, answers(b, t0))
        # Not vacuous: the answers hold the states (2500 rows and more in one answer).
        assert max(len(v) for k, v in first.items() if k.startswith("describe")) > 2500 * 30
        counts = state_counts(ex)
        assert counts == state_counts(co)
        assert counts[(TOPIC, 0)] == 2500 + 1  # with the open transaction's producer

        # Produce by seeded ids: the next sequence, a duplicate of the seeded batch, a gap.
        pid0 = seeding["ids"][(TOPIC, 0)][1234]
        pid2 = seeding["ids"][(TOPIC, 2)][3]
        for ask in (a, b):
            ask.sim.clock.advance(1000)
        writes = [(TOPIC, 0, pid0, 1), (TOPIC, 0, pid0, 1), (TOPIC, 2, pid2, 0),
                  (TOPIC, 2, pid2, 5), (LAT_TOPIC, 0, seeding["ids"][(LAT_TOPIC, 0)][0], 1)]
        for w in writes:
            assert a.produce(*w, ts=t0 + 1000) == b.produce(*w, ts=t0 + 1000), w
        compare(answers(a, t0), answers(b, t0))

        # Expiration: a check every 10 minutes drops the states idle for 20 minutes or more.
        seen = []
        for step in range(1, 5):
            now = t0 + step * CHECK_MS
            for ask in (a, b):
                ask.sim.clock.set_ms(now)
                ask.sim.call(ask.sim.state.tick)
            compare(answers(a, now), answers(b, now))
            counts = state_counts(ex)
            assert counts == state_counts(co)
            seen.append(sum(counts.values()))
        # The oldest first; then all seeded but the two written again at t0 + 1 s; then those;
        # the open transaction's producer (two partitions) stays.
        assert seen[0] > seen[1] == 4 and seen[2] == seen[3] == 2, seen
        assert co.call(lambda: [p.index for p in co.state.topics[TOPIC].partitions
                                if p.log is not None and p.log.idle_blocks]) == []


def test_draw_below_is_randrange() -> None:
    for bound in (1, 2, 3, 1000, 1 << 20, 3_600_000, (1 << 31) + 5, 1 << 32, (1 << 32) + 1):
        for count in (0, 1, 31, 32, 100, 5000):
            mine, theirs = random.Random(bound + count), random.Random(bound + count)
            assert list(_draw_below(mine, bound, count)) == [
                theirs.randrange(bound) for _ in range(count)], (bound, count)
            assert mine.random() == theirs.random(), (bound, count)


def test_expiration_at_the_exact_boundary() -> None:
    """A state last written exactly producer.id.expiration.ms ago is expired (Kafka:
    currentTimeMs - lastTimestamp >= producerIdExpirationMs), in a block as explicitly."""
    now, ages = 1_000_000, array("I", [0, 10, 10, 20, 5, 30])
    runs = [range(100, 103), range(2000, 2003)]
    explicit_log, compact_log = PartitionLog(), PartitionLog()
    for pid, age in zip(itertools.chain(*runs), ages, strict=True):
        explicit_log.append_seeded_batch(
            producer_id=pid, producer_epoch=0, base_sequence=0, record_count=1,
            base_timestamp=now - age, max_timestamp=now - age, transactional=False,
            leader_epoch=0)
    compact_log.append_idle_producer_states(runs=runs, ages=ages, now_ms=now, leader_epoch=0)
    seen = []
    for at in (now + 69, now + 70, now + 80, now + 90, now + 95, now + 100):
        for log in (explicit_log, compact_log):
            log.expire_producers(at, 100)
        assert compact_log.producer_rows() == explicit_log.producer_rows(), at
        seen.append(compact_log.producer_state_count())
    assert seen == [6, 5, 4, 2, 1, 0]
    assert compact_log.idle_blocks is None and not compact_log.has_producer_states


# java.util.HashMap<Long, Integer> (JDK 17) after put(1000 + 7 i) for i < 100, then remove of
# every key but those with i % 5 == 0, iterated: its table stays at 256 bins (it never shrinks).
JDK_ORDER_AFTER_REMOVALS = [1280, 1035, 1560, 1315, 1070, 1595, 1350, 1105, 1630, 1385, 1140,
                            1665, 1420, 1175, 1455, 1210, 1490, 1245, 1000, 1525]


def test_order_after_expiration_keeps_the_grown_table() -> None:
    """DescribeProducers after most states expired lists the rest as Kafka's HashMap does: in
    the bins of the table it grew to, not of a table sized for what remains."""
    now, pids = 1_000_000, [1000 + 7 * i for i in range(100)]
    ages = array("I", [0 if i % 5 == 0 else 500 for i in range(100)])
    explicit_log, compact_log = PartitionLog(), PartitionLog()
    for pid, age in zip(pids, ages, strict=True):
        explicit_log.append_seeded_batch(
            producer_id=pid, producer_epoch=0, base_sequence=0, record_count=1,
            base_timestamp=now - age, max_timestamp=now - age, transactional=False,
            leader_epoch=0)
    compact_log.append_idle_producer_states(runs=[range(p, p + 1) for p in pids], ages=ages,
                                            now_ms=now, leader_epoch=0)
    for log in (explicit_log, compact_log):
        log.expire_producers(now + 100, 300)
        assert [row[0] for row in log.producer_rows()] == JDK_ORDER_AFTER_REMOVALS


def test_block_rejects_a_mismatch() -> None:
    with pytest.raises(ValueError):
        IdleProducerBlock(0, [range(3)], array("I", [1, 2]), 0, 0, False, 0)


def test_memory_and_time_per_state_printed() -> None:
    """Not asserted as timing: what one state costs each way (bytes traced, seconds)."""
    rows = []
    for name, seeder in (("explicit", explicit), ("compact", compact)):
        measured = []
        for traced in (False, True):
            state = ClusterState([1, 2, 3], ManualClock(10**12))
            state.create_topic(TOPIC, 20)
            if traced:
                tracemalloc.start()
            start = time.perf_counter()
            for p in range(20):
                seeder(state, TOPIC, p, 1000, now_ms=10**12, max_age_ms=MAX_AGE_MS,
                       rng=random.Random(p))
            measured.append(time.perf_counter() - start)
            if traced:
                measured.append(tracemalloc.get_traced_memory()[0])
                tracemalloc.stop()
        rows.append((name, measured[2] / 20_000, measured[0] / 20_000 * 1e6))
    for name, per_state, us in rows:
        print(f"{name}: {per_state:.0f} bytes and {us:.2f} us per producer state")
    assert rows[1][1] < rows[0][1] / 20  # the point of it: at least 20 times smaller
