"""Messages that tell the truth: what scan says about transaction.version depends on what the
brokers' Kafka version supports; the simulator's bad flags are named; a client_id Kafka's
request header cannot carry is refused at load, and the longest it can carry is polled."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_sim.cluster import SimCluster
from simhelpers import cluster_settings, poll_once

from exporter.analyze import analyze
from exporter.config import ConfigError, load_settings
from exporter.scan import exposure_note

LONGEST_CLIENT_ID_BYTES = 2**15 - 1
"""The request header's client_id is a nullable string with an int16 length."""


def _note(profile: str) -> str | None:
    with SimCluster(brokers=1, profile=profile) as sim:
        settings = cluster_settings(sim, "c1")
        return exposure_note(analyze(poll_once(sim, settings), settings))


def test_a_3_9_cluster_is_told_its_kafka_version_lacks_transaction_version_2() -> None:
    """3.9's ApiVersions v4 (the simulator's profile is a live 3.9.2 broker's answer, verbatim)
    lists no transaction.version among the supported features: there is nothing to raise."""
    note = _note("3.9")
    assert note is not None
    assert "transaction.version 2 is not supported by the brokers' Kafka version" in note
    assert "came with Kafka 4.0" in note
    assert "(below 2)" not in note


def test_a_4_x_cluster_at_level_2_gets_no_note_and_one_below_is_told_how_to_raise_it() -> None:
    assert _note("4.0.2") is None
    with SimCluster(brokers=1, profile="4.0.2") as sim:
        settings = cluster_settings(sim, "c1")
        snapshot = analyze(poll_once(sim, settings), settings)
    assert snapshot.supported_transaction_version == 2
    # The same brokers with the feature downgraded to 0 (kafka-features.sh downgrade).
    lowered = dataclasses.replace(snapshot, finalized_transaction_version=0)
    note = exposure_note(lowered)
    assert note is not None and "finalized transaction.version 0 (below 2; the brokers " \
        "support 2: kafka-features.sh upgrade --feature transaction.version=2)" in note


@pytest.mark.parametrize(("args", "flag"), [
    (["--host", "999.1.1.1"], "--host '999.1.1.1': cannot be resolved"),
    (["--tls-cert", "{garbage}", "--tls-key", "{garbage}"], "--tls-cert/--tls-key: cannot load"),
    (["--tls-ca", "{garbage}"], "--tls-ca: cannot load"),
])
def test_sim_names_the_flag_of_a_bad_host_or_tls_file(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    argv = [a.replace("{garbage}", str(garbage)) for a in args]
    done = subprocess.run([sys.executable, "-m", "exporter", "sim", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 3


def _config(tmp_path: Path, client_id: str, bootstrap: str = "127.0.0.1:1") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(f"clusters:\n  - {{name: a, bootstrap_servers: ['{bootstrap}'], "
                    f"client_id: '{client_id}'}}\n")
    return path


def test_a_client_id_longer_than_the_request_header_allows_is_refused_at_load(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(str(_config(tmp_path, "x" * 40_000)), env={})
    assert str(caught.value) == (
        "clusters[0].client_id: at most 32767 bytes in UTF-8 (Kafka's request header gives it "
        "an int16 length), got 40000")
    # Bytes, not characters: 16,384 two-byte characters are 32,768 bytes.
    with pytest.raises(ConfigError, match="got 32768"):
        load_settings(str(_config(tmp_path, "é" * 16_384)), env={})
    with pytest.raises(ConfigError, match="KTE_CLUSTER_CLIENT_ID: at most 32767 bytes"):
        load_settings(env={"KTE_CLUSTER_BOOTSTRAP_SERVERS": "127.0.0.1:1",
                           "KTE_CLUSTER_CLIENT_ID": "y" * 40_000})


def test_the_longest_client_id_kafka_can_carry_is_polled(tmp_path: Path) -> None:
    with SimCluster(brokers=1) as sim:
        settings = load_settings(str(_config(tmp_path, "x" * LONGEST_CLIENT_ID_BYTES,
                                             sim.bootstrap_servers.split(",")[0])), env={})
        cluster = settings.clusters[0]
        snapshot = analyze(poll_once(sim, cluster), cluster)
    assert snapshot.up, snapshot.request_errors
