"""`kafka-txn-exporter abort`: write an ABORT marker for one hanging transaction.

The only code in the exporter that writes to Kafka. It is a separate, explicit command with its
own credentials (the `admin` section of the config): the daemon (`serve`) never imports this
package and its principal needs no write rights at all.

What it does, following `kafka-transactions.sh abort` (docs/kafka-semantics.md#abort) with
the exporter's own safety checks in front:

1. Detect again, through the same code the daemon uses: `ClusterObserver.poll()` (the
   poller and the orphan tracker) and `analyze()` with `scan`'s orphan check
   (`exporter.scan.poll_with_orphan_check`: a second poll asks the coordinators about every
   transaction the first saw open, a third confirms "not tracked") classify the transaction
   that starts at `--start-offset` (late? hanging? orphaned? tracked?), with the
   transactional id its coordinator lists, whatever its age.
2. Metadata -> the partition's leader; DescribeProducers on that leader -> the producer whose
   CurrentTxnStartOffset equals `--start-offset` (its id, epoch and CoordinatorEpoch), and
   ListOffsets READ_COMMITTED / READ_UNCOMMITTED -> LSO and high watermark before.
3. Refuse unless that transaction is late and classified `hanging`, or orphaned (`--force`
   overrides).
4. Print exactly what would be written; without `--yes` stop there (dry run, nothing written).
5. WriteTxnMarkers v1 (ABORT) to the leader with the reported producer id and epoch and the
   reported CoordinatorEpoch (-1, "no marker written yet", becomes 0 as Java's
   `producerState.coordinatorEpoch().orElse(0)`; never -1, which kafka-python's
   `abort_transaction` defaults to and the broker fences).
6. Check that the transaction is gone from DescribeProducers and that the LSO advanced.

Modules: `settings` (the `admin` config section), `decide` (pure: verdict and plan), `io`
(the admin session against the cluster), `cli` (the command). Exit status: 0 aborted (or dry
run ok), 1 refused, 2 error.
"""

from exporter.abort.cli import EXIT_ABORTED, EXIT_ERROR, EXIT_REFUSED, build_parser, run_abort
from exporter.abort.decide import Verdict, describe_plan, judge, marker_coordinator_epoch
from exporter.abort.io import AbortFailed, PartitionState, write_txn_markers_request
from exporter.abort.settings import AdminSettings, admin_cluster_settings, load_admin_settings

__all__ = [
    "EXIT_ABORTED",
    "EXIT_ERROR",
    "EXIT_REFUSED",
    "AbortFailed",
    "AdminSettings",
    "PartitionState",
    "Verdict",
    "admin_cluster_settings",
    "build_parser",
    "describe_plan",
    "judge",
    "load_admin_settings",
    "marker_coordinator_epoch",
    "run_abort",
    "write_txn_markers_request",
]
