"""Kafka's own tools as oracles for the blocked-groups, exposure and churn truth tests:
ConsumerGroupCommand, ConsoleConsumer, ConfigCommand and FeatureCommand, run from the same jars
as the broker, parsed; plus waiting for the exporter to see a change and reading the series
the exporter would expose for a snapshot."""

from __future__ import annotations

import functools
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import RealPollEnv

from exporter.expose.collector import SnapshotCollector
from exporter.model import ClusterObservation, ClusterSnapshot
from exporter.snapshots import SnapshotStore

CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
VERIFICATION_CONFIG = "transaction.partition.verification.enable"


@dataclass(frozen=True)
class GroupOffsetRow:
    """One row of `kafka-consumer-groups.sh --describe`."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None


def _offset(field: str) -> int | None:
    return None if field == "-" else int(field)


def describe_groups(cluster: RealKafkaCluster, *groups: str) -> dict[str, list[GroupOffsetRow]]:
    """`kafka-consumer-groups.sh --describe --group G ...` (one tool run for all), by group."""
    args = ["--bootstrap-server", cluster.bootstrap, "--describe"]
    for group in groups:
        args += ["--group", group]
    result = cluster.tool(CONSUMER_GROUP_COMMAND, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    rows: dict[str, list[GroupOffsetRow]] = {group: [] for group in groups}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[0] not in rows:
            continue
        rows[fields[0]].append(
            GroupOffsetRow(
                group=fields[0],
                topic=fields[1],
                partition=int(fields[2]),
                current_offset=_offset(fields[3]),
                log_end_offset=_offset(fields[4]),
            )
        )
    return rows


def console_consume(
    cluster: RealKafkaCluster, topic: str, group: str, isolation_level: str,
    timeout_ms: int = 15_000,
) -> list[str]:
    """Kafka's console consumer in group `group` from the beginning until nothing new arrives
    for `timeout_ms`; it commits its position when it closes (auto-commit). The values printed.
    The idle clock starts before the group is joined: on a busy machine the join alone took
    more than 4 s, and the consumer then printed nothing."""
    result = cluster.tool(
        CONSOLE_CONSUMER, "--bootstrap-server", cluster.bootstrap, "--topic", topic,
        "--group", group, "--from-beginning", "--isolation-level", isolation_level,
        "--timeout-ms", str(timeout_ms),
    )  # fmt: skip
    # It ends on the timeout with a TimeoutException logged and exit code 0 (ERROR on stderr).
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if line]


def config_command(cluster: RealKafkaCluster) -> str:
    """kafka-configs.sh's class: org.apache.kafka.tools.ConfigCommand where the tools jar has it
    (4.4 ships only that), else the Scala kafka.admin.ConfigCommand (3.9, 4.0)."""
    return _config_command(cluster.install.lib)


@functools.cache
def _config_command(lib: Path) -> str:
    for jar in lib.glob("kafka-tools-*.jar"):
        with zipfile.ZipFile(jar) as archive:
            if "org/apache/kafka/tools/ConfigCommand.class" in archive.namelist():
                return "org.apache.kafka.tools.ConfigCommand"
    return "kafka.admin.ConfigCommand"


def alter_broker_config(
    cluster: RealKafkaCluster,
    entity: str | None,
    *,
    add: str | None = None,
    delete: str | None = None,
) -> None:
    """`kafka-configs.sh --alter --entity-type brokers` on the cluster default (`entity` None)
    or one broker: a dynamic config, in effect without a restart."""
    target = ["--entity-default"] if entity is None else ["--entity-name", entity]
    change = ["--add-config", add] if add is not None else ["--delete-config", str(delete)]
    result = cluster.tool(
        config_command(cluster), "--bootstrap-server", cluster.bootstrap, "--alter",
        "--entity-type", "brokers", *target, *change,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def finalized_feature_levels(cluster: RealKafkaCluster) -> dict[str, str]:
    """`kafka-features.sh describe`: feature -> FinalizedVersionLevel (as printed)."""
    result = cluster.tool(FEATURE_COMMAND, "--bootstrap-server", cluster.bootstrap, "describe")
    assert result.returncode == 0, result.stdout + result.stderr
    levels: dict[str, str] = {}
    for line in result.stdout.splitlines():
        # `Name: value` pairs, tab-separated before 4.x, space-padded after.
        tokens = line.split()
        fields = {
            tokens[i].rstrip(":"): tokens[i + 1]
            for i in range(len(tokens) - 1)
            if tokens[i].endswith(":")
        }
        if "Feature" in fields and "FinalizedVersionLevel" in fields:
            levels[fields["Feature"]] = fields["FinalizedVersionLevel"]
    return levels


def set_transaction_version(cluster: RealKafkaCluster, level: int, upgrade: bool) -> str:
    """`kafka-features.sh upgrade|downgrade --feature transaction.version=N`; the tool's output
    (the caller asserts on success or refusal by its return code)."""
    result = cluster.tool(
        FEATURE_COMMAND, "--bootstrap-server", cluster.bootstrap,
        "upgrade" if upgrade else "downgrade", "--feature", f"transaction.version={level}",
    )  # fmt: skip
    return f"rc={result.returncode} {result.stdout}{result.stderr}"


def poll_until(
    env: RealPollEnv,
    done: Callable[[ClusterObservation, ClusterSnapshot], bool],
    timeout_s: float = 30.0,
    interval_s: float = 0.5,
    max_polls: int | None = None,
) -> tuple[ClusterObservation, ClusterSnapshot, int]:
    """Poll until `done` holds (or fail after `timeout_s`, or after `max_polls` polls): the last
    poll, and how many it took."""
    deadline = time.monotonic() + timeout_s
    polls = 0
    while True:
        observation, snapshot = env.poll()
        polls += 1
        if done(observation, snapshot):
            return observation, snapshot, polls
        if time.monotonic() > deadline or (max_polls is not None and polls >= max_polls):
            raise AssertionError(f"not seen after {polls} polls in {timeout_s} s")
        time.sleep(interval_s)


def exposed_samples(
    env: RealPollEnv, snapshot: ClusterSnapshot
) -> list[tuple[str, dict[str, str], float]]:
    """The samples `/metrics` would serve for `snapshot`: (name, labels, value)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    store = SnapshotStore([env.settings])
    store.publish(snapshot, 0.1)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(store))
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    ]
