"""How long a large configuration takes to be judged: N clusters with a typo in the last one.

Each measurement is a fresh process (`--child VARIANT CLUSTERS FILE`) that reads one generated
file and reports its wall time, CPU time and peak RSS:

- `parse`: libyaml's `yaml.load(text, CSafeLoader)` alone, no limit checked, nothing validated:
  the floor the exporter's loader is compared with (the baseline).
- `exporter`: `exporter.config.load_settings(FILE)`, which must fail with the one-line error
  naming `clusters[N-1]`: the file's limits (depth, duplicate keys, alias expansion), the YAML,
  then every cluster's fields.
- `pure_python`: `yaml.load(text, SafeLoader)`, the pure-Python parser the loader used to build
  on (only at the smaller size: at the larger one it takes a minute).
- `exporter_other`: with `--exporter-root DIR`, `exporter` as another checkout's package (its
  `exporter/` directory imported first), for a before/after pair measured in the same run.

With `--valid` the last cluster has no typo: the exporter variants build every cluster's
settings record too (what a start with a good file costs).

Usage: python benchmarks/bench_config_load.py [--sizes 6000,60000] [--repeat 3]
                                              [--exporter-root DIR] [--valid]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common

PURE_PYTHON_MAX_CLUSTERS = 10_000
VALID_SUFFIX = "-valid.yaml"


def write_config(path: Path, clusters: int, valid: bool = False) -> int:
    """`clusters` one-line entries, the last with the typo `bootstrap_server` unless `valid`;
    its size."""
    with path.open("w") as f:
        f.write("clusters:\n")
        for i in range(clusters - 1):
            f.write(f"  - {{name: cluster-{i:05d}, bootstrap_servers: ['b{i:05d}.ex:9092']}}\n")
        key = "bootstrap_servers" if valid else "bootstrap_server"
        f.write(f"  - {{name: cluster-last, {key}: ['b-last.ex:9092']}}\n")
    return path.stat().st_size


def child(variant: str, clusters: int, path: str, exporter_root: str | None = None) -> int:
    if exporter_root is not None:  # before the clock starts: choosing the package is not loading
        sys.path.insert(0, exporter_root)
    started, cpu_started = time.perf_counter(), time.process_time()
    outcome = ""
    if variant in ("exporter", "exporter_other"):
        from exporter.config import ConfigError, load_settings

        valid = path.endswith(VALID_SUFFIX)
        try:
            outcome = f"{len(load_settings(path, env={}).clusters)} clusters"
        except ConfigError as exc:
            outcome = str(exc)
        expected = (f"{clusters} clusters" if valid
                    else f"clusters[{clusters - 1}]: unknown key 'bootstrap_server'")
        if not outcome.startswith(expected):
            raise SystemExit(f"unexpected outcome: {outcome[:200]!r}")
    else:
        import yaml

        loader = yaml.CSafeLoader if variant == "parse" else yaml.SafeLoader
        with open(path) as f:
            data = yaml.load(f.read(), Loader=loader)
        outcome = f"{len(data['clusters'])} clusters"
    common.emit({
        "variant": variant, "clusters": clusters,
        "wall_seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(time.process_time() - cpu_started, 3),
        "peak_rss_mib": round(common.hwm_mib(), 1), "outcome": outcome[:80],
        "exporter_package": _exporter_package(variant),
    })
    return 0


def _exporter_package(variant: str) -> str | None:
    """Where the measured `exporter` package came from (proof of which revision ran)."""
    module = sys.modules.get("exporter")
    if not variant.startswith("exporter") or module is None or module.__file__ is None:
        return None
    return str(Path(module.__file__).resolve().parent.parent)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        return child(argv[1], int(argv[2]), argv[3], *argv[4:5])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="6000,60000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--exporter-root", type=Path, default=None,
                        help="another checkout whose exporter package is measured as "
                             "`exporter_other`, interleaved with this tree's")
    parser.add_argument("--valid", action="store_true",
                        help="no typo: load every cluster to its settings record")
    args = parser.parse_args(argv)
    other_root = str(args.exporter_root.resolve()) if args.exporter_root else None
    sizes = [int(s) for s in args.sizes.split(",")]
    script = Path(__file__).resolve()
    load_at_start = common.load_average()
    by_size: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for clusters in sizes:
            path = Path(tmp) / f"clusters-{clusters}{VALID_SUFFIX if args.valid else '.yaml'}"
            size_bytes = write_config(path, clusters, args.valid)
            variants = ["parse", "exporter"]
            if other_root is not None:
                variants.append("exporter_other")
            if clusters <= PURE_PYTHON_MAX_CLUSTERS:
                variants.append("pure_python")
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for _ in range(args.repeat):  # interleaved: load changes hit every variant alike
                for variant in variants:
                    extra = [other_root] if variant == "exporter_other" and other_root else []
                    runs[variant].append(
                        common.run_child(script, [variant, str(clusters), str(path), *extra]))
            summary: dict[str, Any] = {"clusters": clusters, "file_bytes": size_bytes}
            for variant, records in runs.items():
                summary[variant] = {
                    "wall_seconds_median": statistics.median(r["wall_seconds"] for r in records),
                    "cpu_seconds_median": statistics.median(r["cpu_seconds"] for r in records),
                    "peak_rss_mib_max": max(r["peak_rss_mib"] for r in records),
                    "exporter_package": records[0].get("exporter_package"),
                }
            summary["cpu_ratio_exporter_vs_parse"] = common.ratio(
                summary["exporter"]["cpu_seconds_median"], summary["parse"]["cpu_seconds_median"])
            if "exporter_other" in summary:
                summary["cpu_ratio_exporter_vs_exporter_other"] = common.ratio(
                    summary["exporter"]["cpu_seconds_median"],
                    summary["exporter_other"]["cpu_seconds_median"])
            if "pure_python" in summary:
                summary["cpu_ratio_exporter_vs_pure_python"] = common.ratio(
                    summary["exporter"]["cpu_seconds_median"],
                    summary["pure_python"]["cpu_seconds_median"])
            by_size[clusters] = summary
    result: dict[str, Any] = {
        "benchmark": "config_load", "machine": common.machine_info(),
        "machine_load_average_at_start": load_at_start,
        "machine_load_average_at_end": common.load_average(),
        "pid": os.getpid(), "valid": args.valid, "sizes": list(by_size.values()),
    }
    if len(sizes) >= 2:
        small, large = by_size[min(sizes)], by_size[max(sizes)]
        result["exporter_cpu_scaling"] = common.ratio(
            large["exporter"]["cpu_seconds_median"], small["exporter"]["cpu_seconds_median"])
        result["clusters_scaling"] = common.ratio(max(sizes), min(sizes))
    common.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
