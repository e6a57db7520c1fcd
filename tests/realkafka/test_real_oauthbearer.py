"""OAUTHBEARER against a real broker on every version of the matrix: the broker validates the
exporter's JWTs with Kafka's own validator against the JWKS of the suite's OIDC provider
(tests/realkafka/oauthkafka.py, tests/security/oidc.py), with an expected audience and issuer,
and limits each session to the token's lifetime.

One broker and one provider per version for the module. Clients of the provider: a good one
(principal `exporter`, README's least-privilege grants), one whose tokens live 8 s, one whose
tokens name another audience, one another issuer, one whose secret is revoked. The late hanging
transaction is the truth case the suite proves over PLAIN and SCRAM, judged here against
Kafka's own `kafka-transactions.sh find-hanging`. Facts relied on:
docs/kafka-semantics.md#oauthbearer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml
from kafka_sim.producer import hanging_transaction
from oauthkafka import OAuthKafka, start_oauth_kafka
from prometheus_client.parser import text_string_to_metric_families
from realhelpers import LATE_BACKDATE_MS, create_topic, find_hanging, unique
from securekafka import README_GRANTS, allow, wait_acls
from security.oidc import Client, OidcProvider
from waits import wait_for

from exporter.analyze import analyze
from exporter.model import Classification
from exporter.observe import ClusterObserver
from exporter.scan import EXIT_AUTHENTICATION_FAILED, EXIT_HANGING
from exporter.settings import OAuthBearerSettings, SaslSettings

SECRETS = {
    "kafka-txn-exporter": "good-secret-5b7c1e",
    "short-lived": "short-secret-0a9d4f",
    "wrong-audience": "aud-secret-61e2b8",
    "wrong-issuer": "iss-secret-c47f03",
    "revoked": "revoked-secret-9e15aa",
}
SHORT_LIFETIME_SECONDS = 8.0
EXTENSIONS = {"logicalCluster": "lkc-abc123", "identityPoolId": "pool-xyz"}


@dataclass(frozen=True)
class World:
    kafka: OAuthKafka
    topic: str
    hanging: tuple[int, int, int]
    """(producer id, epoch, start offset) of the late hanging transaction in `topic`-0."""


@pytest.fixture(scope="module")
def world(focused_kafka_version: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp(f"oauth-{focused_kafka_version}")
    provider = OidcProvider(workdir / "oidc")
    provider.add_client("kafka-txn-exporter",
                        Client(SECRETS["kafka-txn-exporter"], subject="exporter"))
    provider.add_client("short-lived", Client(SECRETS["short-lived"], subject="exporter",
                                              lifetime_seconds=SHORT_LIFETIME_SECONDS))
    provider.add_client("wrong-audience", Client(SECRETS["wrong-audience"], subject="exporter",
                                                 audience="another-service"))
    provider.add_client("wrong-issuer", Client(SECRETS["wrong-issuer"], subject="exporter",
                                               issuer="https://127.0.0.1:1/realms/other"))
    provider.add_client("revoked", Client(SECRETS["revoked"], subject="exporter"))
    try:
        kafka = start_oauth_kafka(focused_kafka_version, workdir, provider)
        try:
            topic = create_topic(kafka.cluster, unique("oauth"), partitions=2)
            allow(kafka.cluster, "exporter", README_GRANTS)
            wait_acls(kafka.cluster, "exporter", len(README_GRANTS))
            hanging = hanging_transaction(kafka.cluster.bootstrap, unique("oauth-txn"), topic, 0,
                                          backdate_ms=LATE_BACKDATE_MS)
            yield World(kafka, topic, hanging)
        finally:
            kafka.cluster.stop()
    finally:
        provider.close()


def test_a_good_token_finds_the_late_hanging_transaction_as_kafkas_tool_does(
    world: World,
) -> None:
    """README's grants are enough for principal `exporter` from the token's sub; the SASL
    extensions (Confluent Cloud's) are sent and a plain Kafka broker takes them."""
    oauth = world.kafka.oauth("kafka-txn-exporter", SECRETS["kafka-txn-exporter"],
                              extensions=EXTENSIONS)
    settings = replace(world.kafka.settings("kafka-txn-exporter", "unused"),
                       sasl=SaslSettings("OAUTHBEARER", oauthbearer=oauth))
    before = len(world.kafka.provider.token_requests("kafka-txn-exporter"))
    poller = ClusterObserver(settings)
    try:
        observation = poller.poll()
        poller.poll()
    finally:
        poller.close()
    snapshot = analyze(observation, settings)
    assert snapshot.up and observation.request_errors == ()
    # One token for every connection and both polls.
    assert len(world.kafka.provider.token_requests("kafka-txn-exporter")) == before + 1
    found = {(t.transaction.topic, t.transaction.partition): t
             for t in snapshot.late_transactions}
    hanging = found[(world.topic, 0)]
    assert hanging.classification is Classification.HANGING
    assert (hanging.transaction.producer_id, hanging.transaction.producer_epoch,
            hanging.transaction.current_txn_start_offset) == world.hanging
    kafkas = {(row.topic, row.partition, row.producer_id, row.start_offset)
              for row in find_hanging(world.kafka.cluster) if row.topic == world.topic}
    assert kafkas == {(world.topic, 0, world.hanging[0], world.hanging[2])}


def cluster_entry(world: World, name: str, client_id: str, tmp_path: Path) -> dict[str, object]:
    secret_file = tmp_path / f"{name}.secret"
    secret_file.write_text(SECRETS[client_id] + "\n")
    return {
        "name": name,
        "bootstrap_servers": world.kafka.bootstrap.split(","),
        "request_timeout_seconds": 10,
        "poll_interval_seconds": 1,
        "min_reported_duration_seconds": 0,
        "tls": {"ca_file": world.kafka.ca_file},
        "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
            "token_endpoint_url": world.kafka.provider.token_url,
            "client_id": client_id,
            "client_secret_file": str(secret_file),
            "scope": "kafka",
            "ca_file": world.kafka.provider.ca_file,
        }},
    }


def scan(tmp_path: Path, *clusters: dict[str, object]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "scan.yaml"
    config.write_text(yaml.safe_dump({"clusters": list(clusters)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    return subprocess.run(
        [sys.executable, "-m", "exporter", "scan", "--config", str(config),
         "--orphan-check-seconds", "0"],
        env=env, capture_output=True, text=True, timeout=120)


def no_secret(text: str, world: World) -> None:
    for secret in SECRETS.values():
        assert secret not in text
    for request in world.kafka.provider.requests:
        assert "token" not in request  # the provider keeps no token to compare with
    assert "eyJ" not in text  # the start of every JWT (base64url of '{"')
    assert "Traceback" not in text


def test_scan_names_the_reason_of_each_refused_token_and_exits_3(
    world: World, tmp_path: Path
) -> None:
    """Wrong audience, wrong issuer: the broker refuses the token; a revoked secret: the token
    endpoint refuses the client. One line each, exit 3, no secret and no token anywhere."""
    world.kafka.provider.revoke("revoked")
    result = scan(tmp_path,
                  cluster_entry(world, "audience", "wrong-audience", tmp_path),
                  cluster_entry(world, "issuer", "wrong-issuer", tmp_path),
                  cluster_entry(world, "revoked", "revoked", tmp_path))
    assert result.returncode == EXIT_AUTHENTICATION_FAILED, result.stderr
    no_secret(result.stdout + result.stderr, world)
    lines = {line.removeprefix("error: cluster ").partition(": ")[0]:
             line.removeprefix("error: cluster ").partition(": ")[2]
             for line in result.stderr.splitlines() if line.startswith("error: cluster ")}
    assert sorted(lines) == ["audience", "issuer", "revoked"], result.stderr
    for name in ("audience", "issuer"):
        assert lines[name].startswith("authentication failed: SASL OAUTHBEARER with 127.0.0.1:")
        # The broker's answer is its challenge; the reason is only in its log.
        assert lines[name].endswith(': SASL_AUTHENTICATION_FAILED {"status":"invalid_token"}')
    assert lines["revoked"] == (
        f"authentication failed: token endpoint {world.kafka.provider.token_url} refused the "
        "request: HTTP 401: invalid_client (Invalid client credentials)")


def test_scan_with_the_good_client_finds_the_hanging_transaction(
    world: World, tmp_path: Path
) -> None:
    result = scan(tmp_path, cluster_entry(world, "oauth", "kafka-txn-exporter", tmp_path))
    assert result.returncode == EXIT_HANGING, result.stderr
    no_secret(result.stdout + result.stderr, world)
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[:2] for row in rows if row[0] == world.topic] == [[world.topic, "0"]]


# --------------------------------------------------------------------------- under serve

class Serve:
    """`kafka-txn-exporter serve` as a process, its log in a file, /metrics read on demand."""

    def __init__(self, config: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
        env["KTE_LOG_FORMAT"] = "json"
        env["KTE_LOG_LEVEL"] = "debug"  # every log line searched for secrets and tokens
        self.log = log
        self._log_file = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", str(config),
             "--web.listen-address", "127.0.0.1", "--web.port", "0"],
            env=env, stdout=subprocess.DEVNULL, stderr=self._log_file, text=True)
        self.url = wait_for("serve's exporter_started", self._listen_url, 60)

    def _listen_url(self) -> str | None:
        assert self.process.poll() is None, self.log.read_text()
        for line in self.log.read_text().splitlines():
            if '"exporter_started"' in line:
                return str(json.loads(line)["listen"]).removesuffix("/metrics")
        return None

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return str(answer.read().decode())

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(self.get("/metrics"))
                for s in family.samples}

    def up(self) -> float | None:
        return self.samples().get(("kafka_txn_exporter_up", frozenset({("cluster", "oauth")})))

    def auth_errors(self) -> float:
        return sum(value for (name, labels), value in self.samples().items()
                   if name == "kafka_txn_exporter_request_errors_total"
                   and ("error", "AUTHENTICATION_FAILED") in labels
                   and ("cluster", "oauth") in labels)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._log_file.close()


def test_serve_renews_short_tokens_without_a_gap_and_rides_out_the_provider_down(
    world: World, tmp_path: Path
) -> None:
    """Tokens that live 8 s, polled every second. The provider down at the start: up 0, the
    reason counted. Back: up 1, and through several token lifetimes (the broker ends each
    session at its token's expiry) never a poll with up 0. Down in the middle: the last token
    serves until it expires, then up 0 counted; back: up 1 again."""
    provider = world.kafka.provider
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"clusters": [
        cluster_entry(world, "oauth", "short-lived", tmp_path)]}))
    provider.stop_token_endpoint()
    serve = Serve(config, tmp_path / "serve.log")
    try:
        wait_for("up 0 counted while the token endpoint is down",
                 lambda: serve.up() == 0 and serve.auth_errors() > 0, 90)
        provider.start_token_endpoint()
        wait_for("up 1 once the token endpoint is back", lambda: serve.up() == 1, 90)

        # Several token lifetimes: every scrape up 1, tokens renewed before they expire.
        first = len(provider.token_requests("short-lived"))
        errors = serve.auth_errors()
        polls: list[float] = []
        deadline = time.monotonic() + 3 * SHORT_LIFETIME_SECONDS
        while time.monotonic() < deadline:
            up = serve.up()
            assert up == 1, f"up {up} while renewing: {serve.log.read_text()[-3000:]}"
            polls.append(up)
            time.sleep(0.2)
        renewed = [r for r in provider.token_requests("short-lived")[first:]
                   if r["status"] == 200]
        assert len(renewed) >= 2  # at least one per lifetime after the first
        assert len(renewed) <= 3 * SHORT_LIFETIME_SECONDS  # never one per connection
        assert serve.auth_errors() == errors
        hanging = serve.samples().get(("kafka_partitions_with_hanging_transactions",
                                       frozenset({("cluster", "oauth"), ("broker", "1")})))
        assert hanging == 1  # the late hanging transaction, seen over OAUTHBEARER

        # Down in the middle: the last token serves until its exp, then up 0 counted.
        provider.stop_token_endpoint()
        last_expiry = max(r["expires_at"] for r in provider.token_requests("short-lived")
                          if r["status"] == 200)
        wait_for("up 0 after the last token expired", lambda: serve.up() == 0,
                 SHORT_LIFETIME_SECONDS + 60)
        assert time.time() >= last_expiry  # never up 0 while a valid token was in hand
        # The first poll after the expiry may find its connection closed by the broker (the
        # session ended: a lost connection, counted as such); the next one fails to log in.
        wait_for("the failed login counted", lambda: serve.auth_errors() > errors, 30)
        provider.start_token_endpoint()
        wait_for("up 1 after the provider came back", lambda: serve.up() == 1, 90)

        page = serve.get("/") + serve.get("/metrics")
        no_secret(page, world)
    finally:
        serve.stop()
    log = serve.log.read_text()
    no_secret(log, world)
    assert "unreachable: [Errno 111] Connection refused" in log


def test_a_mounted_token_file_is_used_and_read_again_when_renewed(
    world: World, tmp_path: Path
) -> None:
    """A platform-mounted token that lives 6 s, renewed in the file by the platform: after the
    first token's expiry (the broker ends the session then) the poll authenticates with the
    file's new token; a file not renewed after its token expired is up 0 with the cause."""
    provider = world.kafka.provider
    token_file = tmp_path / "token"
    first_expiry = int(time.time()) + 6
    token_file.write_text(provider.token_for(
        Client("", subject="exporter", lifetime_seconds=6)) + "\n")
    settings = replace(world.kafka.settings("unused", "unused"), sasl=SaslSettings(
        "OAUTHBEARER", oauthbearer=OAuthBearerSettings(token_file=str(token_file))))
    poller = ClusterObserver(settings)
    try:
        assert analyze(poller.poll(), settings).up
        token_file.write_text(provider.token_for(
            Client("", subject="exporter", lifetime_seconds=15)))
        renewed_expiry = int(time.time()) + 15
        wait_for("the first token's expiry", lambda: time.time() > first_expiry + 1, 30)
        assert analyze(poller.poll(), settings).up  # the new token, read from the file
        wait_for("the renewed token's expiry", lambda: time.time() > renewed_expiry + 1, 30)
        expired = poller.poll()
        assert not analyze(expired, settings).up
        assert ("Metadata", "AUTHENTICATION_FAILED") in {
            (e.api, e.error) for e in expired.request_errors}
        assert "token_file: the token in it expired" in str(poller.metadata_error)
    finally:
        poller.close()
