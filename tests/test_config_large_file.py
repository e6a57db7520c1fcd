"""A configuration file under the 4 MiB cap is judged in seconds: 60,000 clusters with a typo in
the last one get the one-line error naming that cluster's field, at a cost linear in the file
and a small multiple of libyaml's bare parse of such text (measured in the same test, in
CPU seconds so that other work on the machine does not move the bound).

On the pure-Python YAML parser the loader was built on, 60,000 clusters took 24 CPU seconds
(over a minute of wall time on a busy machine)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from exporter.config import ConfigError, load_settings
from exporter.yamlfile import MAX_FILE_BYTES

MAX_COST_VS_BARE_PARSE = 3.0
"""Per cluster, checks, construction and validation may cost this many bare libyaml parses
(about 1.2 measured: benchmarks/bench_config_load.py); on the pure-Python parser, about 4."""
MAX_SCALING_FOR_TEN_TIMES_THE_CLUSTERS = 20.0
"""Linear is 10; a quadratic step would give 100."""


def _write(path: Path, clusters: int) -> Path:
    with path.open("w") as f:
        f.write("clusters:\n")
        for i in range(clusters - 1):
            f.write(f"  - {{name: cluster-{i:05d}, bootstrap_servers: ['b{i:05d}.ex:9092']}}\n")
        f.write("  - {name: cluster-last, bootstrap_server: ['b-last.ex:9092']}\n")
    return path


def _judged(path: Path, clusters: int) -> float:
    """CPU seconds to the error, which must name the last cluster's unknown key."""
    started = time.process_time()
    with pytest.raises(ConfigError) as caught:
        load_settings(str(path), env={})
    cpu = time.process_time() - started
    message = str(caught.value)
    assert message.startswith(f"clusters[{clusters - 1}]: unknown key 'bootstrap_server'")
    assert "\n" not in message and len(message) < 1000
    return cpu


def _bare_parse(path: Path) -> float:
    started = time.process_time()
    data = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    assert len(data["clusters"]) > 0
    return time.process_time() - started


def test_sixty_thousand_clusters_are_judged_in_linear_time(tmp_path: Path) -> None:
    small = _write(tmp_path / "small.yaml", 6_000)
    large = _write(tmp_path / "large.yaml", 60_000)
    assert 3 * 1024 * 1024 < large.stat().st_size < MAX_FILE_BYTES

    small_cpu = _judged(small, 6_000)
    large_cpu = _judged(large, 60_000)
    bare_small_cpu = _bare_parse(small)  # the baseline, per 6,000 clusters

    assert large_cpu < MAX_COST_VS_BARE_PARSE * 10 * bare_small_cpu, (large_cpu, bare_small_cpu)
    assert large_cpu < MAX_SCALING_FOR_TEN_TIMES_THE_CLUSTERS * small_cpu, (large_cpu, small_cpu)


def test_limits_still_hold_on_the_fast_parser(tmp_path: Path) -> None:
    """Depth, duplicate keys and alias bombs are checked on the event stream, with their line."""
    cases = {
        "clusters:\n" + "  " + "[" * 70 + "]" * 70 + "\n": "nested deeper than 64 levels",
        "clusters: []\nweb: {}\nclusters: []\n": "duplicate key 'clusters' (line 3, column 1)",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, "
                  f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                  f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
                  for i in range(6)): "expands to more than 100000 values",
        "a: &a [1, *a]\n": "an alias refers to its own anchor (line 1, column 11)",
        "a: 1\nb: \x07\n": "invalid YAML (line 2): control character U+0007",
    }
    for index, (text, expected) in enumerate(cases.items()):
        path = tmp_path / f"case{index}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_settings(str(path), env={})
        assert expected in str(caught.value), (text[:60], str(caught.value))
