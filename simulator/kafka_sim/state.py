"""The simulated cluster's brains: topics, partitions, leadership, configs, logs, coordinators.

`ClusterState` holds every broker's view at once (the simulator keeps replicas identical);
`kafka_sim.router.BrokerRouter` answers each request as the broker it reached, from this state.
All state is confined to the simulator's event-loop thread: no locking.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_sim.broker_configs_4_0 import CAPTURED_BROKER_CONFIGS
from kafka_sim.clock import Clock
from kafka_sim.coordinator import (
    CONSUMER_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinator,
    partition_for,
)
from kafka_sim.fetch_sessions import FetchSessionCache
from kafka_sim.groups import GroupCoordinator
from kafka_sim.jvm_order import java_string_hash, scala_mutable_hash_order
from kafka_sim.log import PartitionLog
from kafka_sim.versions import PROFILES, VersionProfile

# ConfigSource (DescribeConfigsResponse)
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_LIST = 7

TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, int]] = {
    "cleanup.policy": ("log.cleanup.policy", CONFIG_TYPE_LIST),
}
"""Topic config -> (the broker setting it defaults to, its ConfigType), where a capture shows it
(15)."""

# Kafka defaults of the two settings the captured broker had changed (06, 07); everything else
# in CAPTURED_BROKER_CONFIGS is what that broker reported and stands as this simulator's
# server.properties.
_RESTORED_DEFAULTS: dict[str, str] = {
    "transaction.max.timeout.ms": "900000",
    "transaction.partition.verification.enable": "true",
}
# ProducerStateManager's check interval (producer.id.expiration.check.interval.ms, internal).
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000

OPERATIONS = ("ALL", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")
CLUSTER_OPERATION_CODES: dict[str, int] = {
    "CREATE": 5, "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
}
"""The operations an ACL can grant on the cluster (Kafka's AclEntry.supportedOperations(CLUSTER)),
by AclOperation code: the bits of DescribeCluster's ClusterAuthorizedOperations."""


def random_cluster_id() -> str:
    """A Kafka Uuid string: 22 chars of URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool
    config_type: int


class Partition:
    """One topic partition. `log` stays None until something is written to it."""

    __slots__ = ("index", "isr", "leader_epoch", "leader_id", "log", "replicas", "topic")

    def __init__(self, topic: Topic, index: int, replicas: tuple[int, ...]) -> None:
        self.topic = topic
        self.index = index
        self.replicas = replicas
        self.isr = replicas
        self.leader_id = replicas[0]
        self.leader_epoch = 0
        self.log: PartitionLog | None = None


class Topic:
    __slots__ = ("configs", "is_internal", "metadata_cache", "name", "partitions",
                 "producer_columns", "topic_id")

    def __init__(self, name: str, topic_id: uuid.UUID, is_internal: bool,
                 configs: Mapping[str, str]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.configs = dict(configs)
        self.partitions: list[Partition] = []
        # (ClusterState.metadata_version, partition rows in Metadata order, their encoded
        # partitions array by layout): rebuilt on change
        self.metadata_cache: tuple[int, list[Any], dict[int, bytes]] | None = None
        # ((metadata_version, number of logs in the cluster), each partition's replicas, each
        # partition's log or None): what DescribeProducers reads, as two dense lists
        self.producer_columns: tuple[tuple[int, int], list[tuple[int, ...]],
                                     list[PartitionLog | None]] | None = None


@dataclass(slots=True)
class InjectedError:
    api_key: int
    error_code: int
    broker_id: int | None
    topic: str | None
    partition: int | None
    transactional_id: str | None
    count: int | None


class ClusterState:
    """Every broker's state (the router hands it to the handler of each request)."""

    def __init__(
        self,
        node_ids: Sequence[int],
        clock: Clock | None = None,
        broker_config: Mapping[str, str] | None = None,
        profile: str | VersionProfile = "4.0",
        cluster_id: str | None = None,
        profiles: Mapping[int, str] | None = None,
    ) -> None:
        """`profile` is the cluster's (its finalized features, e.g. transaction.version);
        `profiles` overrides the release of single brokers, as during a rolling upgrade: each
        such broker advertises and honours only its own release's API versions."""
        if not node_ids or len(set(node_ids)) != len(node_ids):
            raise ValueError("node ids must be distinct and non-empty")
        self.node_ids: tuple[int, ...] = tuple(node_ids)
        self.clock = clock if clock is not None else Clock()
        self.profile: VersionProfile = PROFILES[profile] if isinstance(profile, str) else profile
        self.broker_profiles: dict[int, VersionProfile] = {}
        for broker_id, name in (profiles or {}).items():
            if broker_id not in self.node_ids:
                raise ValueError(f"profile for unknown broker {broker_id}")
            if name not in PROFILES:
                raise ValueError(f"unknown profile {name!r}; known: {sorted(PROFILES)}")
            self.broker_profiles[broker_id] = PROFILES[name]
        self.cluster_id = cluster_id if cluster_id is not None else random_cluster_id()
        self._broker_overrides = dict(broker_config or {})
        self._configs = self._build_configs()
        self._config_values = {e.name: e.value for e in self._configs}
        self.endpoints: dict[int, tuple[str, int]] = {b: ("127.0.0.1", 9092) for b in node_ids}
        self.alive: set[int] = set(node_ids)
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        self._topic_counter = 0
        self.metadata_version = 0  # bumped whenever leaders, replicas or live brokers change
        self._replica_tuples: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.logs: list[Partition] = []  # partitions whose log exists, for periodic scans
        self.marker_blocked: set[int] = set()
        self.errors: list[InjectedError] = []
        self.denied: dict[tuple[str, str], set[str]] = {}
        self.denied_groups: dict[tuple[str, str], set[str]] = {}
        self.denied_cluster: dict[str, set[str]] = {}
        self.coordinator = TransactionCoordinator(
            self,
            num_partitions=self.config_int("transaction.state.log.num.partitions"),
            server_transaction_version=self.profile.transaction_version(),
            timeout_abort_fences_under_tv2=self.profile.timeout_abort_fences_under_tv2,
        )
        self.groups = GroupCoordinator(self.group_partition_for)
        self._rng = random.Random()
        start = self.clock.now_ms()
        self._next_timeout_sweep_ms = start + self.config_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms")
        self._next_producer_expiration_ms = start + PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS
        self.fetch_sessions: dict[int, FetchSessionCache] = {}

    def profile_for(self, broker_id: int) -> VersionProfile:
        """The release broker `broker_id` runs (its own during a rolling upgrade)."""
        return self.broker_profiles.get(broker_id, self.profile)

    def fetch_session_cache(self, broker_id: int) -> FetchSessionCache:
        """The broker's fetch sessions (KIP-227): its own, in memory (a restart drops them),
        `max.incremental.fetch.session.cache.slots` of them."""
        cache = self.fetch_sessions.get(broker_id)
        if cache is None:
            slots = int(self.config("max.incremental.fetch.session.cache.slots") or 1000)
            cache = self.fetch_sessions[broker_id] = FetchSessionCache(slots, rng=self._rng)
        return cache

    def drop_fetch_sessions(self, broker_id: int) -> None:
        """A broker process that stops loses its fetch sessions."""
        self.fetch_sessions.pop(broker_id, None)

    # -- time ------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def tick(self) -> None:
        """Periodic broker work: marker retries, the timeout sweep, producer expiration."""
        now = self.now_ms()
        self.coordinator.retry_markers()
        if now >= self._next_timeout_sweep_ms:
            interval = self.config_int(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms")
            self.coordinator.abort_timed_out_transactions()
            missed = (now - self._next_timeout_sweep_ms) // interval + 1
            self._next_timeout_sweep_ms += missed * interval
        if now >= self._next_producer_expiration_ms:
            expiration_ms = self.config_int("producer.id.expiration.ms")
            for partition in self.logs:
                if partition.log is not None and partition.log.has_producer_states:
                    partition.log.expire_producers(now, expiration_ms)
            missed = (now - self._next_producer_expiration_ms) // (
                PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS) + 1
            self._next_producer_expiration_ms += missed * PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS

    # -- configuration ---------------------------------------------------------------------
    def _build_configs(self) -> list[ConfigEntry]:
        entries: list[ConfigEntry] = []
        seen: set[str] = set()
        for name, value, read_only, source, sensitive, ctype in CAPTURED_BROKER_CONFIGS:
            if name in _RESTORED_DEFAULTS:
                value, source = _RESTORED_DEFAULTS[name], SOURCE_DEFAULT_CONFIG
            if name in self._broker_overrides:
                value, source = self._broker_overrides[name], SOURCE_STATIC_BROKER_CONFIG
            entries.append(ConfigEntry(name, value, read_only, source, sensitive, ctype))
            seen.add(name)
        for name, value in self._broker_overrides.items():
            if name not in seen:
                entries.append(ConfigEntry(name, value, True, SOURCE_STATIC_BROKER_CONFIG, False,
                                           CONFIG_TYPE_STRING))
        return entries

    def broker_configs(self, broker_id: int) -> list[ConfigEntry]:
        """DescribeConfigs entries of one broker, with its own id and listener filled in."""
        host, port = self.endpoints.get(broker_id, ("127.0.0.1", 9092))
        verification = self.profile_for(broker_id).supports_partition_verification
        out: list[ConfigEntry] = []
        for e in self._configs:
            if e.name == "transaction.partition.verification.enable" and not verification:
                continue  # added in 3.6 (KIP-890 part 1): older brokers do not know it
            if e.name in ("node.id", "broker.id") and e.name not in self._broker_overrides:
                e = ConfigEntry(e.name, str(broker_id), e.read_only, e.source, e.is_sensitive,
                                e.config_type)
            elif e.name == "advertised.listeners" and e.name not in self._broker_overrides:
                e = ConfigEntry(e.name, f"PLAINTEXT://{host}:{port}", e.read_only, e.source,
                                e.is_sensitive, e.config_type)
            out.append(e)
        return out

    def topic_configs(
        self, topic: Topic, keys: set[str] | None
    ) -> list[tuple[str, str | None, int, int]]:
        """DescribeConfigs TOPIC entries: (name, value, config_source, config_type).

        A setting of the topic's own is DYNAMIC_TOPIC_CONFIG (1). A requested key the topic does
        not set, of the topic configs in TOPIC_CONFIG_SYNONYMS, reports the broker setting it
        defaults to, with that setting's source (15: cleanup.policy "delete", DEFAULT_CONFIG).
        Without keys only the topic's own settings are listed (the full default list of a
        real broker is not captured).
        """
        out: list[tuple[str, str | None, int, int]] = []
        for name, value in topic.configs.items():
            if keys is None or name in keys:
                ctype = TOPIC_CONFIG_SYNONYMS.get(name, (name, CONFIG_TYPE_STRING))[1]
                out.append((name, value, SOURCE_DYNAMIC_TOPIC_CONFIG, ctype))
        for name in keys or ():
            if name in topic.configs or name not in TOPIC_CONFIG_SYNONYMS:
                continue
            broker_name, ctype = TOPIC_CONFIG_SYNONYMS[name]
            entry = next((e for e in self._configs if e.name == broker_name), None)
            if entry is not None:
                out.append((name, entry.value, entry.source, ctype))
        if keys is not None:
            # Filtered by key like the broker's own entries: a Scala mutable.HashMap's order (07).
            out = scala_mutable_hash_order(out, lambda e: java_string_hash(e[0]))
        return out

    def config(self, name: str) -> str | None:
        return self._config_values.get(name)

    def config_int(self, name: str) -> int:
        value = self._config_values.get(name)
        if value is None:
            raise KeyError(name)
        return int(value)

    def config_bool(self, name: str) -> bool:
        return (self._config_values.get(name) or "").lower() == "true"

    @property
    def transaction_max_timeout_ms(self) -> int:
        return self.config_int("transaction.max.timeout.ms")

    def log_append_time(self, topic: Topic) -> bool:
        ts_type = topic.configs.get("message.timestamp.type",
                                    self.config("log.message.timestamp.type") or "CreateTime")
        return ts_type == "LogAppendTime"

    # -- brokers ---------------------------------------------------------------------------
    def set_endpoint(self, broker_id: int, host: str, port: int) -> None:
        self._check_broker(broker_id)
        self.endpoints[broker_id] = (host, port)

    def set_endpoints(self, endpoints: Mapping[int, tuple[str, int]]) -> None:
        for broker_id, (host, port) in endpoints.items():
            self.set_endpoint(broker_id, host, port)

    def _check_broker(self, broker_id: int) -> None:
        if broker_id not in self.node_ids:
            raise ValueError(f"no broker {broker_id}; brokers are {list(self.node_ids)}")

    def alive_brokers(self) -> list[int]:
        return sorted(self.alive)

    def controller_id(self) -> int:
        """KRaft brokers answer Metadata with a random alive broker as the controller id."""
        alive = self.alive_brokers()
        return self._rng.choice(alive) if alive else -1

    def set_broker_alive(self, broker_id: int, alive: bool) -> None:
        """A dead broker leaves Metadata; its partitions fail over to live ISR replicas.

        With no live replica left the partition has no leader (-1) until the broker returns.
        """
        self._check_broker(broker_id)
        if alive == (broker_id in self.alive):
            return
        self.metadata_version += 1
        if alive:
            self.alive.add(broker_id)
        else:
            self.alive.discard(broker_id)
        for topic in self.topics.values():
            for p in topic.partitions:
                if broker_id not in p.replicas:
                    continue
                if not alive:
                    isr = tuple(r for r in p.isr if r != broker_id)
                    if p.leader_id == broker_id:
                        p.leader_id = isr[0] if isr else -1
                        p.leader_epoch += 1
                    p.isr = isr if isr else p.isr
                else:
                    if p.leader_id == -1:
                        p.leader_id = broker_id
                        p.leader_epoch += 1
                        p.isr = (broker_id,)
                    elif broker_id not in p.isr:
                        p.isr = tuple(r for r in p.replicas if r in self.alive)
        if alive:
            self.coordinator.retry_markers()

    def block_markers(self, broker_id: int, blocked: bool) -> None:
        """Stall marker delivery to partitions this broker leads (Prepare* stays, LSO stays)."""
        self._check_broker(broker_id)
        if blocked:
            self.marker_blocked.add(broker_id)
        else:
            self.marker_blocked.discard(broker_id)
            self.coordinator.retry_markers()

    # -- topics ----------------------------------------------------------------------------
    def _replicas(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        return self._replica_tuples.setdefault(replicas, replicas)

    def create_topic(
        self, name: str, partitions: int, replication_factor: int = 1,
        configs: Mapping[str, str] | None = None, *, is_internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """Create a topic; leaders and replicas go round-robin over the brokers."""
        if name in self.topics:
            raise ValueError(f"topic {name!r} already exists")
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        brokers = sorted(self.node_ids)
        n = len(brokers)
        if not 1 <= replication_factor <= n:
            raise ValueError(f"replication factor {replication_factor} with {n} brokers")
        topic = Topic(name, topic_id or uuid.uuid4(), is_internal, configs or {})
        start = self._topic_counter % n
        self._topic_counter += 1
        parts = topic.partitions
        for i in range(partitions):
            first = start + i
            replicas = self._replicas(
                tuple(brokers[(first + j) % n] for j in range(replication_factor)))
            parts.append(Partition(topic, i, replicas))
        self.topics[name] = topic
        self.topics_by_id[topic.topic_id] = topic
        return topic

    def partition(self, topic: str, partition: int) -> Partition | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.partition(topic, partition) is not None

    def log_of(self, p: Partition) -> PartitionLog:
        """The partition's log, created on first use; logs are only ever created here and
        never dropped, so `len(self.logs)` counts the changes of "which partitions have one"."""
        if p.log is None:
            p.log = PartitionLog()
            self.logs.append(p)
        return p.log

    def ensure_internal_topic(self, name: str) -> bool:
        """Create __transaction_state / __consumer_offsets on first use; True if it existed.

        Like Kafka, the lookup that triggers the creation is answered COORDINATOR_NOT_AVAILABLE
        (capture 08); the next one finds the coordinator (09).
        """
        if name in self.topics:
            return True
        if name == TRANSACTION_STATE_TOPIC:
            count = self.config_int("transaction.state.log.num.partitions")
            rf = self.config_int("transaction.state.log.replication.factor")
            configs = {"cleanup.policy": "compact"}
        else:
            count = self.config_int("offsets.topic.num.partitions")
            rf = self.config_int("offsets.topic.replication.factor")
            configs = {"cleanup.policy": "compact"}
        if rf > len(self.alive):
            return False  # not enough brokers: stays unavailable, as in Kafka
        self.create_topic(name, count, rf, configs, is_internal=True)
        return False

    def txn_state_partition_leader(self, partition: int) -> tuple[int, int] | None:
        topic = self.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return None
        p = topic.partitions[partition]
        if p.leader_id == -1 or p.leader_id not in self.alive:
            return None
        return p.leader_id, p.leader_epoch

    def group_partition_for(self, group_id: str) -> int:
        """The group's __consumer_offsets partition (Utils.abs(groupId.hashCode) % partitions)."""
        topic = self.topics.get(CONSUMER_OFFSETS_TOPIC)
        count = len(topic.partitions) if topic is not None else self.config_int(
            "offsets.topic.num.partitions")
        return partition_for(group_id, count)

    def group_partitions_led_by(self, broker_id: int) -> list[int]:
        """The __consumer_offsets partitions whose group coordinator `broker_id` is."""
        topic = self.topics.get(CONSUMER_OFFSETS_TOPIC)
        if topic is None or broker_id not in self.alive:
            return []
        return [p.index for p in topic.partitions if p.leader_id == broker_id]

    def group_coordinator(self, group_id: str) -> tuple[int, int] | None:
        topic = self.topics.get(CONSUMER_OFFSETS_TOPIC)
        if topic is None:
            return None
        p = topic.partitions[self.group_partition_for(group_id)]
        if p.leader_id == -1 or p.leader_id not in self.alive:
            return None
        return p.leader_id, p.leader_epoch

    def write_txn_marker(
        self, topic: str, partition: int, *, producer_id: int, producer_epoch: int, commit: bool,
        coordinator_epoch: int, transaction_version: int,
    ) -> int | None:
        p = self.partition(topic, partition)
        if p is None:
            return 3  # UNKNOWN_TOPIC_OR_PARTITION
        if p.leader_id == -1 or p.leader_id not in self.alive or p.leader_id in self.marker_blocked:
            return None
        return self.log_of(p).append_marker(
            producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
            coordinator_epoch=coordinator_epoch, timestamp_ms=self.now_ms(),
            leader_epoch=p.leader_epoch, transaction_version=transaction_version,
        )

    # -- control surface -------------------------------------------------------------------
    def move_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make `broker_id` the leader (a reassignment if it holds no replica); epoch + 1."""
        self._check_broker(broker_id)
        p = self.partition(topic, partition)
        if p is None:
            raise ValueError(f"no partition {topic}-{partition}")
        if broker_id not in p.replicas:
            p.replicas = self._replicas(
                tuple(broker_id if r == p.leader_id else r for r in p.replicas)
                if p.leader_id in p.replicas else (broker_id, *p.replicas[1:]))
        p.replicas = self._replicas(
            (broker_id, *tuple(r for r in p.replicas if r != broker_id)))
        p.isr = p.replicas
        p.leader_id = broker_id
        p.leader_epoch += 1
        self.metadata_version += 1
        self.coordinator.retry_markers()

    def move_transaction_coordinator(self, transactional_id: str, broker_id: int) -> None:
        """Move the __transaction_state partition of this id: new coordinator, epoch + 1."""
        if TRANSACTION_STATE_TOPIC not in self.topics:
            self.ensure_internal_topic(TRANSACTION_STATE_TOPIC)
        self.move_partition_leader(TRANSACTION_STATE_TOPIC,
                                   self.coordinator.partition_for(transactional_id), broker_id)

    def inject_error(
        self, api_key: int, error_code: int, *, broker_id: int | None = None,
        topic: str | None = None, partition: int | None = None,
        transactional_id: str | None = None, count: int | None = None,
    ) -> None:
        """Answer matching requests (or items) with `error_code`; `count` None = until cleared.

        A rule with no topic/partition/transactional id hits the API's top-level error code, or
        every item of APIs that only have per-item codes (DescribeProducers, ...).
        """
        self.errors.append(InjectedError(api_key, error_code, broker_id, topic, partition,
                                         transactional_id, count))

    def clear_errors(self) -> None:
        self.errors.clear()

    def injected_error(
        self, api_key: int, broker_id: int, *, topic: str | None = None,
        partition: int | None = None, transactional_id: str | None = None,
    ) -> int | None:
        for rule in self.errors:
            if rule.api_key != api_key:
                continue
            if rule.broker_id is not None and rule.broker_id != broker_id:
                continue
            if rule.topic is not None and rule.topic != topic:
                continue
            if rule.partition is not None and rule.partition != partition:
                continue
            if rule.transactional_id is not None and rule.transactional_id != transactional_id:
                continue
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    self.errors.remove(rule)
            return rule.error_code
        return None

    def deny_topic(self, principal: str, topic: str, operation: str = "ALL") -> None:
        """Deny `principal` ("User:name") an operation on a topic (ALL, READ, WRITE, DESCRIBE).

        DescribeProducers needs READ; Metadata, ListOffsets and DescribeTransactions need
        DESCRIBE; Produce and AddPartitionsToTxn need WRITE; Fetch needs READ; DescribeConfigs
        needs DESCRIBE_CONFIGS, which neither READ nor DESCRIBE implies on a real broker
        (docs/kafka-semantics.md#acls-on-a-real-broker).
        """
        op = operation.upper()
        if op not in OPERATIONS:
            raise ValueError(f"operation must be one of {OPERATIONS}")
        self.denied.setdefault((principal, topic), set()).add(op)

    def authorized(self, principal: str, operation: str, topic: str) -> bool:
        denied = self.denied.get((principal, topic))
        if not denied:
            return True
        return not ("ALL" in denied or operation in denied)

    def deny_group(self, principal: str, group_id: str, operation: str = "ALL") -> None:
        """Deny `principal` an operation on a consumer group (ALL, READ, DESCRIBE).

        FindCoordinator (key type group) and OffsetFetch need DESCRIBE on the group. ListGroups
        still lists it while the principal keeps Describe on the cluster (`deny_cluster`,
        docs/kafka-semantics.md#consumer-groups)."""
        op = operation.upper()
        if op not in OPERATIONS:
            raise ValueError(f"operation must be one of {OPERATIONS}")
        self.denied_groups.setdefault((principal, group_id), set()).add(op)

    def group_authorized(self, principal: str, operation: str, group_id: str) -> bool:
        denied = self.denied_groups.get((principal, group_id))
        if not denied:
            return True
        return not ("ALL" in denied or operation in denied)

    def deny_cluster(self, principal: str, operation: str = "DESCRIBE") -> None:
        """Deny `principal` Describe on the cluster: ListGroups then lists only the groups it
        may Describe, and DescribeCluster reports no authorized operation (0). Only DESCRIBE:
        the other cluster operations gate APIs whose refusal the simulator does not model."""
        op = operation.upper()
        if op != "DESCRIBE":
            raise ValueError("only DESCRIBE on the cluster can be denied")
        self.denied_cluster.setdefault(principal, set()).add(op)

    def cluster_authorized(self, principal: str, operation: str) -> bool:
        return operation not in self.denied_cluster.get(principal, ())

    # -- helpers for seed.py and tests -----------------------------------------------------
    def for_each_partition(self, fn: Callable[[Partition], None]) -> None:
        for topic in self.topics.values():
            for p in topic.partitions:
                fn(p)
