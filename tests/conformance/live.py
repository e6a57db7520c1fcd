"""The capture scenarios run live: the same requests to a simulator and to a real broker.

`LiveBroker` makes a running real Kafka broker (kafka_sim.realkafka) look like the SimCluster
the replays drive (endpoints, bootstrap servers, a clock, create_topic), with the wall clock as
its clock: `advance(ms)` waits. `run_live()` runs the transactions replay (replay.py, up to the
ERRORS phase) and then the consumer-group replay (replay_groups.py) on one target, so a fresh
simulator and a fresh broker go through the same steps in the same order (and allocate the same
producer ids). `compare_live()` compares each answer of the simulator with the real broker's,
field by field, under LIVE_NORMALISATIONS: the same kinds of difference as rules.NORMALISATIONS
(ids, addresses, timestamps), but related to each side's own run instead of to a frozen capture.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_sim.realkafka import RealKafkaCluster

from .harness import (
    GROUPS_DATA_DIR,
    Comparison,
    Rule,
    compare,
    decode_record_batches,
    exchange_files,
    to_plain,
)
from .replay import NODE_ID, Replay, Window
from .replay import TOPICS as TXN_TOPICS
from .replay_groups import TOPICS as GROUP_TOPICS
from .replay_groups import GroupsReplay

LIVE_TXN_FILES = [f for f in exchange_files() if int(f[:2]) <= 49]
"""The transactions capture up to its TIMEOUT phase (FINAL, 50-54, needs 80 s of broker time)."""
LIVE_GROUP_FILES = exchange_files(GROUPS_DATA_DIR)
"""The consumer groups capture, whole."""

LIVE_TOPICS: dict[str, int] = {**TXN_TOPICS, **GROUP_TOPICS}

LIVE_BROKER_CONFIG: dict[str, str] = {
    "transaction.max.timeout.ms": "60000",
    "transaction.partition.verification.enable": "false",
    # The capture broker's server.properties also set these (its 06 answer lists them as
    # STATIC_BROKER_CONFIG, and so does the simulator's 4.0 config table).
    "num.network.threads": "3",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.retention.hours": "168",
    "log.retention.check.interval.ms": "300000",
    # tx-timeout-1 runs with a 1 s timeout live (LIVE_TIMEOUT_TXN_MS): check every second.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
"""The capture's broker settings (tests/data/real-kafka-4.0/README.md); realkafka adds its own
(ports, one-node replication factors, 4 partitions for the internal topics), which the
simulator gets too (`broker_properties`)."""

LIVE_TIMEOUT_TXN_MS = 1000
LIVE_TIMEOUT_ADVANCE_MS = 1500
"""The capture's TIMEOUT phase (45-49) live: tx-timeout-1 times out after 1 s instead of 10 s,
and the clock moves on 1.5 s instead of 25 s, then the replay polls for the abort (the clock:
the simulator's; a real broker's is waited for)."""

SIM_PROFILE_FOR: dict[str, str] = {"3.9.2": "3.9", "4.0.2": "4.0.2", "4.4.0": "4.4"}
"""Real Kafka version -> the simulator's version profile (kafka_sim.versions.PROFILES): each
version of scripts/kafka-versions has a profile recorded from that very release."""


def sim_profile_for(kafka_version: str) -> str:
    """The simulator profile a real version is compared with; a version outside the matrix
    gets the profile of its major.minor release when there is one."""
    if kafka_version in SIM_PROFILE_FOR:
        return SIM_PROFILE_FOR[kafka_version]
    major_minor = ".".join(kafka_version.split(".")[:2])
    return major_minor


class WallClock:
    """A live broker's time: the host's clock; moving it on means waiting."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def advance(self, ms: int) -> None:
        time.sleep(ms / 1000)


@dataclass
class LiveBroker:
    """A running real broker with the surface of SimCluster the replays use."""

    real: RealKafkaCluster
    clock: WallClock = field(default_factory=WallClock)

    @property
    def endpoints(self) -> dict[int, tuple[str, int]]:
        return {NODE_ID: ("127.0.0.1", self.real.port(NODE_ID))}

    @property
    def bootstrap_servers(self) -> str:
        return self.real.bootstrap

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        """CreateTopics, then wait until every partition answers at its leader."""
        self.real.create_topic(name, partitions, replication_factor, configs)


@dataclass
class LiveRun:
    """Both replays' records on one target."""

    txn: Replay
    groups: GroupsReplay

    @property
    def step_errors(self) -> list[str]:
        return self.txn.step_errors + self.groups.step_errors


def run_live(target: Any, *, create_topics: bool) -> LiveRun:
    """The transactions timeline up to TIMEOUT (shortened), then the consumer-group scenario,
    on `target`."""
    if create_topics:
        for name, partitions in LIVE_TOPICS.items():
            target.create_topic(name, partitions)
    txn = Replay(target)
    txn.run(
        timeout_txn_ms=LIVE_TIMEOUT_TXN_MS, timeout_advance_ms=LIVE_TIMEOUT_ADVANCE_MS, final=False
    )
    groups = GroupsReplay(target)
    groups.run()
    return LiveRun(txn, groups)


# ---------------------------------------------------------------------------------------------
# The live normalisations

LIVE_NORMALISATIONS: list[tuple[str, str]] = [
    ("L1 throttle_time_ms", "quota-dependent: any int >= 0 on the simulator."),
    ("L2 cluster_id", "random per cluster: a 22-character base64url id on the simulator."),
    ("L3 topic_id", "random per topic: the simulator's id of the topic the broker's id names."),
    ("L4 host/port", "each side's own listener address."),
    (
        "L5 endpoint and path config values",
        "DescribeConfigs values that name the broker's own ports (listeners, "
        "advertised.listeners, controller.quorum.voters) or its data directory (log.dirs, "
        "metadata.log.dir): any port / any path in the same shape.",
    ),
    (
        "L6 timestamps",
        "wall-clock ms: a timestamp stands for a fact of its side's run (a record's CreateTime "
        "as sent, a COMMIT marker's own timestamp, a coordinator start time inside the window "
        "of the step that stamped it); the simulator's value must stand for the same fact as "
        "the broker's.",
    ),
    ("L7 record batch crc", "depends on timestamps: the simulator's CRC-32C must be valid."),
    ("L8 Fetch records", "compared decoded, batch header and record fields, under L6/L7."),
    (
        "L10 finalized_features_epoch",
        "ApiVersions: the metadata log offset of the cluster's last feature change, so it "
        "differs between any two clusters (a fresh broker's depends on its bootstrap records): "
        "any int >= 0 on the simulator where the broker's is >= 0.",
    ),
    (
        "L11 broker config table outside 4.0",
        "DescribeConfigs of every broker config (06) on 2.8, 3.0, 3.9 and 4.4: the simulator "
        "has one broker config table, the 4.0 capture's (broker_configs_4_0.py); a 2.8 to 3.9 "
        "broker lists ZooKeeper-era configs and a 4.4 broker new ones, in another order and "
        "with other defaults. There only the configs the exporter reads "
        "(transaction.max.timeout.ms, transaction.partition.verification.enable) are compared, "
        "field by field (a release before 3.6 lists the latter on neither side); named-key "
        "answers (07, 16) are compared whole on every version.",
    ),
    (
        "L12 named config order on 4.4",
        "DescribeConfigs with named keys (07, 16) on 4.4: the broker's order is neither the "
        "request's nor the 4.0 Scala hash order the simulator reproduces, and its rule is not "
        "known; the configs may come in another order, each equal field by field.",
    ),
    (
        "L13 Metadata partition order on ZooKeeper-mode brokers",
        "Metadata on 2.8 and 3.0 (ZooKeeper mode): a topic's partitions in another order, each "
        "equal field by field. The broker lists them from its metadata cache, a Scala LongMap "
        "per topic that every UpdateMetadata with partition states copies into a map sized "
        "from the old one, so the order depends on the cache's history of updates (0, 2, 1 "
        "for three partitions after one copy), which the simulator does not model; the "
        "exporter keys partitions by index.",
    ),
    (
        "L9 DescribeGroups order",
        "groups in another order, each equal field for field (tests/conformance "
        "test_conformance_groups_4_0.py N9: HashMap order in the coordinator).",
    ),
]

LIVE_SCENARIO_NOTES: list[tuple[str, str]] = [
    (
        "S1 first InitProducerId",
        "a fresh real broker answers COORDINATOR_LOAD_IN_PROGRESS (14) until the controller "
        "hands it a producer id block; the replay retries (the simulator answers at once: "
        "deliberate, it models no controller round trip).",
    ),
    (
        "S2 markers after EndTxn",
        "a real coordinator writes COMMIT markers after EndTxn has answered (3.9.2 still lists "
        "PrepareCommit, a Produce can land before the marker); the replays wait for "
        "CompleteCommit. The simulator completes at once: deliberate, the delay is not modelled.",
    ),
    (
        "S3 TIMEOUT shortened",
        "tx-timeout-1 times out after 1 s (capture: 10 s) with the abort sweep every second on "
        "both sides; the clock moves on 1.5 s (capture: 25 s), then polls for CompleteAbort.",
    ),
    (
        "S4 FINAL not live",
        "50-54 wait 80 s for a 60 s timeout: covered by the frozen captures and "
        "scripts/refresh-captures, not by the live comparison.",
    ),
    (
        "S5 same configuration",
        "the simulator gets the real broker's server.properties as its static broker config.",
    ),
]
"""How the live scenario differs from the capture's timeline, and why."""

Relation = tuple[str, Callable[[int], bool]]


def _eq(name: str, value: int | None) -> Relation:
    return (name, lambda actual: value is not None and actual == value)


def _within(name: str, window: Window | None) -> Relation:
    return (name, lambda actual: window is not None and window.holds(actual))


def timestamp_facts(run: LiveRun) -> list[Relation]:
    """Every timestamp fact of one side's run: (name, does this value stand for it)."""
    f = run.txn.facts
    out: list[Relation] = []
    if f.idempotent:
        out.append(_eq("idempotent record CreateTime", f.idempotent.batches[0].max_timestamp_ms))
    if f.committed:
        for b in f.committed.batches:
            out.append(_eq("tx-committed-1 record CreateTime", b.max_timestamp_ms))
    out.append(_eq("tx-committed-1 COMMIT marker timestamp", f.commit_marker_ts))
    out.append(_within("tx-committed-1's time window", f.committed_window))
    if f.open_txn:
        for i, b in enumerate(f.open_txn.batches):
            out.append(_eq(f"tx-open-1 batch {i} CreateTime", b.max_timestamp_ms))
    out.append(_within("tx-open-1's first AddPartitionsToTxn window", f.open_add_window))
    out.append(_eq("hang-1 backdated CreateTime", f.hang_timestamp_ms))
    if f.timeout_txn:
        out.append(_eq("tx-timeout-1 record CreateTime", f.timeout_txn.batches[0].max_timestamp_ms))
    out.append(_within("tx-timeout-1's AddPartitionsToTxn window", f.timeout_add_window))
    out.append(_eq("tx-timeout-1 ABORT marker timestamp", f.timeout_abort_marker_ts))
    g = run.groups.facts
    for i, pid in enumerate(sorted(g.marker_timestamps)):
        out.append(_eq(f"group scenario COMMIT marker {i}", g.marker_timestamps[pid]))
    out.append(_eq("grp-hang backdated CreateTime", g.hang_timestamp_ms))
    return out


def _names(facts: list[Relation], value: Any) -> set[str]:
    if not isinstance(value, int):
        return set()
    return {name for name, holds in facts if holds(value)}


def _timestamp(real: LiveRun, sim: LiveRun) -> Callable[[Any, Any], str | None]:
    real_facts = timestamp_facts(real)
    sim_facts = timestamp_facts(sim)

    def check(expected: Any, actual: Any) -> str | None:
        if expected in (-1, 0) or actual in (-1, 0):
            return "sentinel values must be equal"
        want = _names(real_facts, expected)
        if not want:
            return "the broker's value stands for no known fact of its run"
        have = _names(sim_facts, actual)
        if want & have:
            return None
        return f"broker's value is {sorted(want)}; simulator's is {sorted(have) or 'no fact'}"

    return check


_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


def _throttle(expected: Any, actual: Any) -> str | None:
    return None if isinstance(actual, int) and actual >= 0 else "must be an int >= 0"


def _cluster_id(expected: Any, actual: Any) -> str | None:
    ok = isinstance(actual, str) and _CLUSTER_ID.match(actual)
    return None if ok else "not a 22-character base64url cluster id"


def _topic_id(real: LiveRun, sim: LiveRun) -> Callable[[Any, Any], str | None]:
    by_real_id = {v: k for k, v in real.txn.facts.sim_topic_ids.items()}

    def check(expected: Any, actual: Any) -> str | None:
        name = by_real_id.get(expected)
        if name is None:
            return "the broker's topic id is not one of its Metadata 04 answer"
        want = sim.txn.facts.sim_topic_ids.get(name)
        return None if actual == want else f"must be the simulator's id of {name}: {want}"

    return check


def _address(real_value: Any, sim_value: Any) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if expected == real_value and actual == sim_value:
            return None
        return f"must be the simulator's {sim_value!r} where the broker has {real_value!r}"

    return check


_PORT = re.compile(r"(?<=:)\d{2,5}\b")
_PATH = re.compile(r"/[^,]*")


def _config_value(expected: Any, actual: Any) -> str | None:
    """Ports and absolute paths in a config value may differ; the rest must be equal."""
    if not isinstance(expected, str) or not isinstance(actual, str):
        return "must be equal"
    if not _PORT.search(expected) and not expected.startswith("/"):
        return "not an endpoint or path value: must be equal"
    pattern = re.escape(expected)
    pattern = _PORT.sub(r"\\d+", pattern) if _PORT.search(expected) else pattern
    if expected.startswith("/"):
        pattern = ",".join(r"/[^,]*" for _ in expected.split(","))
    return None if re.fullmatch(pattern, actual) else f"must match {pattern!r}"


def _same_groups_any_order(expected: Any, actual: Any) -> str | None:
    if not isinstance(expected, list) or not isinstance(actual, list):
        return "groups must be lists on both sides"

    def key(group: Any) -> str:
        return str(group.get("group_id"))

    result = compare(sorted(expected, key=key), sorted(actual, key=key), [], path="groups")
    return None if result.ok else result.report()


def _records(batch_rules: list[Rule]) -> Callable[[Any, Any], str | None]:
    def check(expected: Any, actual: Any) -> str | None:
        if not isinstance(expected, str) or not isinstance(actual, str):
            return "records must be bytes on both sides"
        exp = decode_record_batches(bytes.fromhex(expected))
        act = decode_record_batches(bytes.fromhex(actual))
        problems = [
            f"batch {i}: CRC-32C invalid" for i, b in enumerate(act) if not b["_crc_valid"]
        ]
        problems.extend(str(m) for m in compare(exp, act, batch_rules, "<batches>").mismatches)
        return "; ".join(problems) or None

    return check


DESCRIBE_GROUPS = 15
METADATA = 3
ZOOKEEPER_PROFILES = ("2.8", "3.0", "3.5", "3.6")
"""The simulator's profiles judged by live ZooKeeper-mode brokers."""
DESCRIBE_CONFIGS = 32
ALL_BROKER_CONFIGS = "06-describeconfigs-v4-broker-all.json"
EXPORTER_BROKER_CONFIGS = (
    "transaction.max.timeout.ms",
    "transaction.partition.verification.enable",
)
"""What the exporter reads with DescribeConfigs (exporter/collect/broker_config.py)."""


FOUR_O = ("4.0", "4.0.2")
"""The profiles whose broker config table is the simulator's (the 4.0 capture's)."""


def _features_epoch(expected: Any, actual: Any) -> str | None:
    if isinstance(expected, int) and isinstance(actual, int) and (expected >= 0) == (actual >= 0):
        return None
    return "must be >= 0 exactly when the broker's is"


def _by_name(configs: Any) -> dict[str, Any]:
    return {c["name"]: c for c in configs} if isinstance(configs, list) else {}


def _exporter_configs(expected: Any, actual: Any) -> str | None:
    real, sim = _by_name(expected), _by_name(actual)
    problems = []
    for name in EXPORTER_BROKER_CONFIGS:
        if name not in real and name not in sim:
            continue  # a release without the setting (verification: before 3.6)
        if name not in real or name not in sim:
            problems.append(f"{name}: broker has it {name in real}, simulator {name in sim}")
            continue
        problems.extend(str(m) for m in compare(real[name], sim[name], [], name).mismatches)
    return "; ".join(problems) or None


def _partitions_any_order(expected: Any, actual: Any) -> str | None:
    if not isinstance(expected, list) or not isinstance(actual, list):
        return "partitions must be lists on both sides"

    def key(partition: Any) -> int:
        return int(partition.get("partition_index", -1))

    result = compare(sorted(expected, key=key), sorted(actual, key=key), [], path="partitions")
    return None if result.ok else result.report()


def _configs_any_order(expected: Any, actual: Any) -> str | None:
    real, sim = _by_name(expected), _by_name(actual)
    if sorted(real) != sorted(sim):
        return f"other configs: broker {sorted(real)}, simulator {sorted(sim)}"
    problems = [str(m) for n in real for m in compare(real[n], sim[n], [], n).mismatches]
    return "; ".join(problems) or None


def live_rules(
    real: LiveRun, sim: LiveRun, api_key: int | None, file: str = "", profile: str = "4.0"
) -> list[Rule]:
    ts = _timestamp(real, sim)
    batch_rules = [
        Rule("*crc", "L7 record batch crc", lambda e, a: None),  # validity: see _records
        Rule("*base_timestamp", "L6 timestamps", ts),
        Rule("*max_timestamp", "L6 timestamps", ts),
        Rule("*records[*].timestamp", "L6 timestamps", ts),
    ]
    host = _address(real.txn.host, sim.txn.host)
    port = _address(real.txn.port, sim.txn.port)
    rules = [
        Rule("throttle_time_ms", "L1 throttle_time_ms", _throttle),
        Rule("cluster_id", "L2 cluster_id", _cluster_id),
        Rule("*topic_id", "L3 topic_id", _topic_id(real, sim)),
        Rule("host", "L4 host/port", host),
        Rule("port", "L4 host/port", port),
        Rule("*.host", "L4 host/port", host),
        Rule("*.port", "L4 host/port", port),
        Rule("results[*].configs[*].value", "L5 endpoint and path config values", _config_value),
        Rule("*last_timestamp", "L6 timestamps", ts),
        Rule("*transaction_start_time_ms", "L6 timestamps", ts),
        Rule("responses[*].partitions[*].records", "L8 Fetch records", _records(batch_rules)),
    ]
    rules.append(Rule("finalized_features_epoch", "L10 finalized_features_epoch", _features_epoch))
    if api_key == METADATA and profile in ZOOKEEPER_PROFILES:
        rules.insert(0, Rule("topics[*].partitions",
                             "L13 Metadata partition order on ZooKeeper-mode brokers",
                             _partitions_any_order))
    if api_key == DESCRIBE_GROUPS:
        rules.append(Rule("groups", "L9 DescribeGroups order", _same_groups_any_order))
    if api_key == DESCRIBE_CONFIGS and file == ALL_BROKER_CONFIGS and profile not in FOUR_O:
        rules.insert(0, Rule("results[*].configs", "L11 broker config table outside 4.0",
                             _exporter_configs))
    elif api_key == DESCRIBE_CONFIGS and profile == "4.4":
        rules.insert(0, Rule("results[*].configs", "L12 named config order on 4.4",
                             _configs_any_order))
    return rules


@dataclass
class LiveAnswer:
    """One request's two answers, and how they compare."""

    file: str
    problems: list[str]
    normalised: list[str]


def _answer(
    file: str,
    api_key: int | None,
    real_run: LiveRun,
    sim_run: LiveRun,
    real: Any,
    sim: Any,
    profile: str,
) -> LiveAnswer:
    """`real`/`sim`: the replay (transactions or groups) of each side holding `file`."""
    rex, sex = real.exchanges.get(file), sim.exchanges.get(file)
    if rex is None or sex is None:
        return LiveAnswer(file, [f"not sent: broker {rex is not None}, sim {sex is not None}"], [])
    r_closed, s_closed = bool(getattr(rex, "closed", False)), bool(getattr(sex, "closed", False))
    if rex.response is None or sex.response is None:
        if rex.response is None and sex.response is None and r_closed == s_closed:
            return LiveAnswer(file, [], [])
        return LiveAnswer(
            file,
            [
                f"broker: {'closed' if r_closed else rex.error or 'answered'}; "
                f"simulator: {'closed' if s_closed else sex.error or 'answered'}"
            ],
            [],
        )
    result: Comparison = compare(
        to_plain(real.decoded(file)),
        to_plain(sim.decoded(file)),
        live_rules(real_run, sim_run, api_key, file, profile),
    )
    problems = [str(m) for m in result.mismatches]
    if not problems and not result.normalised and rex.response != sex.response:
        problems.append(
            "decoded fields are equal but the bytes differ:\n"
            f"  broker    {rex.response.hex()}\n  simulator {sex.response.hex()}"
        )
    return LiveAnswer(file, problems, result.normalised)


def compare_live(real: LiveRun, sim: LiveRun, profile: str) -> dict[str, LiveAnswer]:
    """Every exchange of both scenarios: the simulator's answer against the broker's."""
    out: dict[str, LiveAnswer] = {}
    for r, s in ((real.txn, sim.txn), (real.groups, sim.groups)):
        for file, cap in r.captures.items():
            if cap.is_exchange and file in r.exchanges:
                out[file] = _answer(file, cap.api_key, real, sim, r, s, profile)
    return out


def broker_properties(real: RealKafkaCluster, node_id: int = NODE_ID) -> dict[str, str]:
    """The broker's server.properties (what realkafka wrote), to give the simulator the same
    static configuration, so DescribeConfigs can be compared value by value."""
    text = (real.workdir / f"node-{node_id}" / "server.properties").read_text()
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            props[key.strip()] = value.strip()
    return props


# ---------------------------------------------------------------------------------------------
# The exporter's own requests, at the versions it negotiates with each side

EXPORTER_CLIENT_ID = "kafka-txn-exporter"
EXPORTER_REQUESTS = [
    "Metadata", "DescribeCluster", "DescribeProducers", "ListTransactions",
    "DescribeTransactions", "FindCoordinator transactions", "FindCoordinator groups",
    "DescribeConfigs broker", "DescribeConfigs topics", "ListGroups", "OffsetFetch",
    "ListOffsets read_uncommitted", "ListOffsets read_committed", "Fetch",
]  # fmt: skip
"""The names of exporter_requests(), in order."""


class _Negotiator:
    """The exporter's version choice (BrokerConnection.version_for) against one side's
    ApiVersions answer, for the exporter's request builders."""

    def __init__(self, api_versions: dict[int, tuple[int, int]]) -> None:
        self.api_versions = api_versions

    def version_for(self, request_class: Any, max_version: int | None = None) -> int:
        from exporter.collect.connection import BrokerConnection

        version: int = BrokerConnection.version_for(
            self,  # type: ignore[arg-type]
            request_class,
            max_version,
        )
        return version


def exporter_requests(side: LiveRun) -> list[tuple[str, Any]]:
    """(name, request) for every API the exporter sends, built by the exporter's own builders
    (exporter/collect/client.py, exporter/collect/apis/) at the version it would choose with
    this side; request None where that side does not offer the API (the exporter leaves it
    unsent and says why)."""
    import uuid

    from kafka.protocol.metadata import FindCoordinatorRequest
    from kafka.protocol.metadata.metadata import MetadataRequest

    from exporter.collect import client as c
    from exporter.collect.apis import (
        describe_cluster,
        describe_configs,
        describe_producers,
        describe_transactions,
        find_coordinator,
        list_groups,
        list_offsets,
        list_transactions,
        metadata,
        offset_fetch,
    )
    from exporter.collect.failures import UnsupportedApi

    resp = side.txn.decoded("01-apiversions-v3.json")
    neg = _Negotiator({a.api_key: (a.min_version, a.max_version) for a in resp.api_keys})
    ids = side.txn.facts.sim_topic_ids
    topics = list(TXN_TOPICS)
    builders: list[tuple[str, Callable[[], Any]]] = [
        ("Metadata", lambda: metadata.build_metadata_request(
            topics, neg.version_for(MetadataRequest))),
        ("DescribeCluster", lambda: describe_cluster.describe_cluster_request()(neg)),
        ("DescribeProducers", lambda: describe_producers.describe_producers_request(
            [("hang-test", [0, 1, 2]), ("txn-open", [0, 1, 2])])(neg)),
        ("ListTransactions", lambda: list_transactions.list_transactions_request()(neg)),
        ("DescribeTransactions", lambda: describe_transactions.describe_transactions_request(
            ["tx-open-1", "hang-1", "tx-committed-1", "tx-timeout-1"])(neg)),
        # Below v4 the exporter sends one request per id: the first is compared.
        ("FindCoordinator transactions", lambda: find_coordinator.find_coordinator_request(
            find_coordinator.TRANSACTION_COORDINATOR_KEY_TYPE,
            ["tx-open-1", "hang-1"][
                : None if neg.version_for(FindCoordinatorRequest) >= 4 else 1
            ],
        )(neg)),
        ("FindCoordinator groups", lambda: find_coordinator.find_coordinator_request(
            find_coordinator.GROUP_COORDINATOR_KEY_TYPE, ["grp-rc"], batched_only=True,
        )(neg)),
        ("DescribeConfigs broker",
         lambda: describe_configs.describe_broker_config_request(NODE_ID)(neg)),
        ("DescribeConfigs topics", lambda: describe_configs.describe_topic_configs_request(
            ["grp-test", "grp-compacted"])(neg)),
        ("ListGroups", lambda: list_groups.list_groups_request()(neg)),
        ("OffsetFetch", lambda: offset_fetch.offset_fetch_request(
            ["grp-rc", "grp-ru", "grp-lagging"], [("grp-test", [0])])(neg)),
        ("ListOffsets read_uncommitted",
         lambda: list_offsets.list_offsets_request(
             {"hang-test": [0], "txn-open": [0, 1, 2]}, 0)(neg)),
        ("ListOffsets read_committed",
         lambda: list_offsets.list_offsets_request(
             {"hang-test": [0], "txn-open": [0, 1, 2]}, 1)(neg)),
        ("Fetch", lambda: c.fetch_request(
            "hang-test", uuid.UUID(ids["hang-test"]) if "hang-test" in ids else None, 0, 0
        )(neg)),
    ]
    out: list[tuple[str, Any]] = []
    for name, build in builders:
        try:
            out.append((name, build()))
        except UnsupportedApi:
            out.append((name, None))  # the exporter does not send it to this broker
    return out


@dataclass
class ExporterExchange:
    name: str
    api_key: int
    version: int
    response: bytes | None
    error: str | None = None
    not_offered: bool = False
    """The side does not offer the API at a version the exporter speaks: nothing was sent."""


NOT_OFFERED = -1


def send_exporter_requests(side: LiveRun) -> dict[str, ExporterExchange]:
    """Each exporter request to this side's broker, on one connection, its answer kept."""
    import traceback

    from kafka_sim.client import RawKafkaClient

    from exporter.collect.fastencode import LeanRequest

    out: dict[str, ExporterExchange] = {}
    host, port = side.txn.host, side.txn.port
    client = RawKafkaClient(host, port, client_id=EXPORTER_CLIENT_ID)
    try:
        for correlation_id, (name, request) in enumerate(exporter_requests(side), start=1000):
            if request is None:
                out[name] = ExporterExchange(name, NOT_OFFERED, NOT_OFFERED, None, None, True)
                continue
            if isinstance(request, LeanRequest):
                framed = request.frame(correlation_id, EXPORTER_CLIENT_ID)
                api_key, version = request.api_key, request.version
            else:
                request.with_header(correlation_id=correlation_id, client_id=EXPORTER_CLIENT_ID)
                framed = bytes(request.encode(header=True, framed=True))
                api_key, version = request.API_KEY, request.API_VERSION
            ex = ExporterExchange(name, int(api_key), int(version), None)
            out[name] = ex
            try:
                client.send_raw(framed[4:])
                ex.response = client.receive_raw()
            except Exception:
                ex.error = traceback.format_exc(limit=3)
                client.close()
                client = RawKafkaClient(host, port, client_id=EXPORTER_CLIENT_ID)
    finally:
        client.close()
    return out


def compare_exporter_requests(
    real: LiveRun,
    sim: LiveRun,
    real_ex: dict[str, ExporterExchange],
    sim_ex: dict[str, ExporterExchange],
    profile: str,
) -> dict[str, LiveAnswer]:
    from kafka_sim.client import response_class

    out: dict[str, LiveAnswer] = {}
    for name, r in real_ex.items():
        s = sim_ex.get(name)
        if s is not None and (r.not_offered or s.not_offered):
            same = r.not_offered == s.not_offered
            out[name] = LiveAnswer(
                f"{name} not offered",
                [] if same else [f"not offered: broker {r.not_offered}, sim {s.not_offered}"],
                [],
            )
            continue
        if s is None or r.response is None or s.response is None:
            out[name] = LiveAnswer(name, [f"broker: {r.error}; simulator: {s and s.error}"], [])
            continue
        if (r.api_key, r.version) != (s.api_key, s.version):
            out[name] = LiveAnswer(
                name, [f"negotiated v{r.version} with the broker, v{s.version} with the sim"], []
            )
            continue
        cls = response_class(r.api_key, r.version)
        result = compare(
            to_plain(cls.decode(r.response, version=r.version, header=True)),
            to_plain(cls.decode(s.response, version=s.version, header=True)),
            live_rules(real, sim, r.api_key, "", profile),
        )
        out[name] = LiveAnswer(
            f"{name} v{r.version}", [str(m) for m in result.mismatches], result.normalised
        )
    return out
