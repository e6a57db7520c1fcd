"""The console script's entry point starts a young collection after many allocations, not
after CPython's default few hundred: a poll's records live as long as the poll, and at the
default they are promoted and start full collections over every long-lived object
(benchmarks/RESULTS.md#garbage-collector)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_entry_point_collects_young_objects_less_often_keeping_older_generations() -> None:
    code = (
        "import gc, sys\n"
        "import exporter.cli\n"
        "exporter.cli.main = lambda: 0\n"  # the command itself is not what is tested
        "from exporter.entry import YOUNG_COLLECTION_THRESHOLD, main\n"
        "before = gc.get_threshold()\n"
        "sys.argv = ['kafka-txn-exporter', 'version']\n"
        "main()\n"
        "start = gc.get_stats()[0]['collections']\n"
        "kept = [[] for _ in range(YOUNG_COLLECTION_THRESHOLD // 2)]\n"
        "young = gc.get_stats()[0]['collections'] - start\n"
        "print(json.dumps([before, gc.get_threshold(), YOUNG_COLLECTION_THRESHOLD, young]))\n"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    before, after, threshold, young_collections = json.loads(out)
    assert threshold == 100_000 > before[0]
    assert after == [threshold, *before[1:]]
    # Half the threshold of new containers, alive at once: no young collection yet (at the
    # default there would be dozens).
    assert young_collections == 0
