"""`kafka-txn-exporter abort` on a real broker shows the transactional id the coordinator lists
whatever the transaction's age: for a young orphaned transaction (which it
confirms with `scan`'s two looks and then aborts) and for an ordinary open one (which it refuses,
saying the coordinator tracks it). docs/abort.md, docs/kafka-semantics.md#abort."""

from __future__ import annotations

import io
import re
from pathlib import Path

from kafka_sim.producer import hanging_transaction, open_transaction
from kafka_sim.realkafka import RealKafkaCluster
from realhelpers import create_topic, unique

from exporter.abort import EXIT_ABORTED, EXIT_REFUSED, run_abort
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings


def _config(tmp_path: Path, cluster: RealKafkaCluster) -> Path:
    path = tmp_path / "exporter.yaml"
    servers = "".join(f"      - {s}\n" for s in cluster.bootstrap.split(","))
    path.write_text(
        "clusters:\n  - name: real\n    bootstrap_servers:\n"
        + servers
        + "admin:\n  clusters:\n    - name: real\n      client_id: txn-admin\n",
        encoding="utf-8",
    )
    return path


def _abort(
    config: Path, topic: str, partition: int, start: int, *extra: str
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_abort(
        ["--config", str(config), "--cluster", "real", "--topic", topic,
         "--partition", str(partition), "--start-offset", str(start),
         "--orphan-check-seconds", "0.5", *extra],
        stdout=out, stderr=err, env={},
    )  # fmt: skip
    return code, out.getvalue(), err.getvalue()


def _field(out: str, name: str) -> str:
    match = re.search(rf"^\s+{re.escape(name)}:\s+(.*)$", out, re.MULTILINE)
    assert match is not None, f"{name} missing from:\n{out}"
    return match.group(1)


def _open_start_offsets(cluster: RealKafkaCluster, topic: str, partition: int) -> list[int]:
    """The leader's open transactions on the partition, by a fresh poll."""
    poller = ClusterObserver(ClusterSettings(name="check", bootstrap_servers=(cluster.bootstrap,)))
    try:
        obs = poller.poll()
    finally:
        poller.close()
    return [
        t.current_txn_start_offset
        for t in obs.open_transactions
        if (t.topic, t.partition) == (topic, partition)
    ]


def test_abort_shows_the_coordinators_id_for_young_orphaned_and_ordinary_transactions(
    real_kafka: RealKafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(real_kafka, unique("abort-report"), partitions=2)
    orphan_id, ordinary_id = unique("young-orphan"), unique("ordinary")
    _, _, orphan_start = hanging_transaction(real_kafka.bootstrap, orphan_id, topic, 0)
    ordinary = open_transaction(
        real_kafka.bootstrap, ordinary_id, topic, [1], transaction_timeout_ms=120_000
    )
    config = _config(tmp_path, real_kafka)
    try:
        ordinary_start = ordinary.result().start_offset(topic, 1)

        # The ordinary transaction: refused, its coordinator lists it, its id is shown.
        code, out, err = _abort(config, topic, 1, ordinary_start, "--yes")
        assert code == EXIT_REFUSED, out + err
        assert _field(out, "TransactionalId") == ordinary_id
        assert f"the coordinator of {ordinary_id!r} (state Ongoing) lists this partition" in err
        assert "nothing written" in out

        # The young orphaned one: not late, confirmed not tracked twice, id shown, dry run.
        code, out, err = _abort(config, topic, 0, orphan_start)
        assert code == EXIT_ABORTED, out + err
        assert _field(out, "TransactionalId") == orphan_id
        reason = _field(out, "Classification")
        assert reason.startswith("orphaned (open 0.")
        assert "did not track this partition on 2 consecutive polls" in reason
        assert "may still be ended" not in out + err
        assert _open_start_offsets(real_kafka, topic, 0) == [orphan_start]

        # And written: the broker no longer holds it open.
        code, out, err = _abort(config, topic, 0, orphan_start, "--yes")
        assert code == EXIT_ABORTED, out + err
        assert f"last stable offset {orphan_start} -> {orphan_start + 2}" in out
        assert _open_start_offsets(real_kafka, topic, 0) == []
        assert _open_start_offsets(real_kafka, topic, 1) == [ordinary_start]
    finally:
        ordinary.close_quietly()
