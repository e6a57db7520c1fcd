"""/metrics and the status page behind TLS and HTTP basic auth (exporter-toolkit web config
`basic_auth_users` with bcrypt hashes), exercised with a real HTTPS client (http.client + ssl).

Decision (README "Security notes"): with basic auth on, every path needs credentials except
the probes /healthz and /readyz (kubelet's httpGet probes send none; they disclose only
liveness and the names of clusters not polled yet). exporter-toolkit protects all paths; a
deployment that wants that can still require client certificates, which cover every path.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from exporter_factories import broker, snapshot

from exporter.config import ConfigError
from exporter.expose import http as web
from exporter.expose.http import BasicAuth, MetricsServer, load_web_config
from exporter.expose.registry import build_registry
from exporter.settings import ClusterSettings, WebSettings
from exporter.snapshots import SnapshotStore
from security.pki import Pki, make_pki

pytestmark = pytest.mark.slow  # TLS and basic auth through real HTTPS clients

USER, PASSWORD = "prometheus", "sc r:pe-Pässword"  # a space, a colon and non-ASCII on purpose
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def store() -> SnapshotStore:
    store = SnapshotStore([ClusterSettings(name="c1", bootstrap_servers=("h:1",))])
    store.publish(snapshot("c1", brokers=[broker(1)]))
    return store


def start(store: SnapshotStore, config: Path) -> MetricsServer:
    server = MetricsServer(
        WebSettings(listen_address="127.0.0.1", port=0, web_config_file=str(config)),
        build_registry(store), store)
    server.start()
    return server


@pytest.fixture
def https_auth(pki: Pki, store: SnapshotStore) -> Iterator[MetricsServer]:
    config = pki.directory / "web.yml"
    config.write_text(
        "tls_server_config: {cert_file: broker.crt, key_file: broker.key}\n"
        "http_server_config: {headers: {X-Content-Type-Options: nosniff}}\n"
        f"basic_auth_users:\n  {USER}: '{HASH}'\n  other: '{HASH}'\n")
    server = start(store, config)
    yield server
    server.stop()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def request(server: MetricsServer, path: str, pki: Pki, authorization: str | None = None,
            context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    context = context or ssl.create_default_context(cafile=pki.crt("ca"))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)
    try:
        headers = {"Authorization": authorization} if authorization else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_right_credentials_get_metrics_and_status_page(https_auth: MetricsServer,
                                                       pki: Pki) -> None:
    status, _, body = request(https_auth, "/metrics", pki, basic(USER, PASSWORD))
    assert status == 200
    assert b'kafka_txn_exporter_up{cluster="c1"} 1.0' in body
    status, _, body = request(https_auth, "/", pki, basic(USER, PASSWORD))
    assert status == 200 and b'data-cluster="c1"' in body


@pytest.mark.parametrize("authorization", [
    None,                                      # missing
    basic(USER, "wrong"),                      # wrong password
    basic(USER, PASSWORD + " "),               # almost right
    basic("nobody", PASSWORD),                 # unknown user, right password
    basic(USER.upper(), PASSWORD),             # user names are case-sensitive
    "Basic " + base64.b64encode(PASSWORD.encode()).decode(),  # no colon
    "Basic not//base64!",                      # malformed
    "Bearer " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),  # other scheme
    basic(USER, "x" * 100),                    # > 72 bytes: bcrypt would truncate
])
def test_missing_or_wrong_credentials_get_401_with_a_challenge(
    https_auth: MetricsServer, pki: Pki, authorization: str | None
) -> None:
    for path in ("/metrics", "/", "/no-such-page"):  # a 404 does not leak before auth
        status, headers, body = request(https_auth, path, pki, authorization)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith('Basic realm="kafka-txn-exporter"')
        assert headers["X-Content-Type-Options"] == "nosniff"  # configured headers on 401 too
        assert b"kafka_" not in body


def test_probes_need_no_credentials(https_auth: MetricsServer, pki: Pki) -> None:
    assert request(https_auth, "/healthz", pki)[:3:2] == (200, b"ok\n")
    assert request(https_auth, "/readyz", pki)[0] == 200


def test_plaintext_is_refused_when_tls_is_on(https_auth: MetricsServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", https_auth.port, timeout=3)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": basic(USER, PASSWORD)})
        with pytest.raises((http.client.HTTPException, ConnectionError, TimeoutError)):
            conn.getresponse()
    finally:
        conn.close()


def test_client_certificate_and_basic_auth_together(pki: Pki, store: SnapshotStore) -> None:
    config = pki.directory / "web.yml"
    config.write_text(
        "tls_server_config:\n  cert_file: broker.crt\n  key_file: broker.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        f"basic_auth_users: {{{USER}: '{HASH}'}}\n")
    server = start(store, config)
    try:
        with_cert = ssl.create_default_context(cafile=pki.crt("ca"))
        with_cert.load_cert_chain(pki.crt("client"), pki.key("client"))
        assert request(server, "/metrics", pki, basic(USER, PASSWORD), with_cert)[0] == 200
        assert request(server, "/metrics", pki, basic(USER, "wrong"), with_cert)[0] == 401
        rogue = ssl.create_default_context(cafile=pki.crt("ca"))
        rogue.load_cert_chain(pki.crt("rogue-client"), pki.key("rogue-client"))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            request(server, "/metrics", pki, basic(USER, PASSWORD), rogue)
    finally:
        server.stop()


def test_basic_auth_over_plain_http_works_but_warns(pki: Pki, store: SnapshotStore,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = pki.directory / "web.yml"
    config.write_text(f"basic_auth_users: {{{USER}: '{HASH}'}}\n")
    server = start(store, config)
    try:
        assert server.scheme == "http"
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 401
        conn.close()
    finally:
        server.stop()
    assert "basic_auth_without_tls" in capsys.readouterr().out


# ------------------------------------------------------------------ the checker itself


class CountingCheckpw:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = bcrypt.checkpw

        def checkpw(password: bytes, hashed: bytes) -> bool:
            self.calls += 1
            return real(password, hashed)

        monkeypatch.setattr(web.bcrypt, "checkpw", checkpw)


def test_successful_checks_are_cached_failures_never(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingCheckpw(monkeypatch)
    auth = BasicAuth({USER: HASH.encode()})
    assert all(auth.check(USER, PASSWORD) for _ in range(20))
    assert counter.calls == 1  # bcrypt once, then the cache
    assert not any(auth.check(USER, "wrong") for _ in range(3))
    assert counter.calls == 4  # every failure pays the full bcrypt cost
    assert not auth.check("nobody", PASSWORD)  # unknown user: a dummy hash is still checked
    assert counter.calls == 5


def test_cache_holds_no_password_and_is_bounded() -> None:
    auth = BasicAuth({USER: HASH.encode()})
    assert auth.check(USER, PASSWORD)
    keys = list(auth._cache)
    assert len(keys) == 1 and len(keys[0]) == 32  # an HMAC-SHA256 digest
    assert PASSWORD.encode() not in keys[0] and USER.encode() not in keys[0]
    # another process (another random HMAC key) would compute a different key
    assert BasicAuth({USER: HASH.encode()})._cache_key != auth._cache_key
    assert web.AUTH_CACHE_SIZE >= 1


def test_same_password_for_another_user_is_not_a_cache_hit() -> None:
    other_hash = bcrypt.hashpw(b"other-password", bcrypt.gensalt(4))
    auth = BasicAuth({USER: HASH.encode(), "other": other_hash})
    assert auth.check(USER, PASSWORD)
    assert not auth.check("other", PASSWORD)


# ------------------------------------------------------------------ config validation


@pytest.mark.parametrize(("users", "expected"), [
    ("[a, b]", "basic_auth_users: expected a mapping"),
    ("{alice: plaintext-password}", "basic_auth_users.alice: expected a bcrypt hash"),
    ("{alice: '$1$md5$abcdefgh'}", "basic_auth_users.alice: expected a bcrypt hash"),
    ("{'a:b': '" + HASH + "'}", "invalid user name 'a:b'"),
    ("{123: '" + HASH + "'}", "invalid user name 123"),
])
def test_bad_basic_auth_users_name_the_user_never_the_value(
    tmp_path: Path, users: str, expected: str
) -> None:
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users: {users}\n")
    with pytest.raises(ConfigError) as info:
        load_web_config(str(config))
    assert expected in str(info.value)
    assert "plaintext-password" not in str(info.value)
    assert "$1$md5" not in str(info.value)


@pytest.mark.parametrize("prefix", ["$2a$", "$2b$", "$2y$"])
def test_every_bcrypt_variant_htpasswd_and_python_produce_is_accepted(
    tmp_path: Path, prefix: str
) -> None:
    hashed = prefix + HASH[4:]
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users: {{{USER}: '{hashed}'}}\n")
    users: Any = load_web_config(str(config)).basic_auth_users
    assert BasicAuth(users).check(USER, PASSWORD)


# ------------------------------------------------------------------ through the CLI


def test_serve_with_web_config_file_tls_and_basic_auth(pki: Pki) -> None:
    """`serve --web.config.file`: start-up validation, then HTTPS + basic auth on the real
    process (the cluster is unreachable on purpose: /metrics is served anyway)."""
    from resilience.harness import ServeProcess, clean_env

    config = pki.directory / "web.yml"
    config.write_text("tls_server_config: {cert_file: broker.crt, key_file: broker.key}\n"
                      f"basic_auth_users: {{{USER}: '{HASH}'}}\n")
    proc = ServeProcess(["serve", "--web.listen-address", "127.0.0.1", "--web.port", "0",
                         "--web.config.file", str(config)],
                        clean_env(KTE_CLUSTER_BOOTSTRAP_SERVERS="127.0.0.1:1"))
    try:
        scraper = proc.wait_started()
        assert scraper.base.startswith("https://")
        port = int(scraper.base.rsplit(":", 1)[1])
        server: Any = type("S", (), {"port": port})
        assert request(server, "/metrics", pki, basic(USER, PASSWORD))[0] == 200
        status, headers, _ = request(server, "/metrics", pki)
        assert status == 401 and "WWW-Authenticate" in headers
        assert request(server, "/healthz", pki)[0] == 200
    finally:
        code, _ = proc.stop()
    assert code == 0
    assert PASSWORD not in proc.output


def test_serve_refuses_a_bad_hash_at_start_up(tmp_path: Path) -> None:
    import subprocess
    import sys

    from resilience.harness import clean_env

    config = tmp_path / "web.yml"
    config.write_text("basic_auth_users: {alice: my-plaintext-password}\n")
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--web.config.file", str(config)],
        env=clean_env(KTE_CLUSTER_BOOTSTRAP_SERVERS="127.0.0.1:1"), capture_output=True,
        text=True, timeout=30)
    assert result.returncode == 2
    assert "basic_auth_users.alice: expected a bcrypt hash" in result.stderr
    assert "my-plaintext-password" not in result.stdout + result.stderr


def _seconds(auth: BasicAuth, user: str, repeat: int) -> float:
    """Shortest duration of a failed check (failures are never cached: bcrypt every time).
    The shortest, not the median: a busy machine only ever adds time (at load 45 a median
    of seven 1 ms checks read 15 ms), while bcrypt's own cost is the floor."""
    durations = []
    for _ in range(repeat):
        start = time.perf_counter()
        assert not auth.check(user, "wrong password")
        durations.append(time.perf_counter() - start)
    return min(durations)


def test_unknown_users_cost_what_known_users_cost_whatever_the_hash_costs() -> None:
    """Users with bcrypt costs 4 and 10 (64x apart). Every unknown name takes about as long as
    one of the known users (nearer to it than 0.4 of the way, in log scale, to the other), and
    unknown names fall on both costs: timing tells neither a name's existence nor absence."""
    slow = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(10))
    fast = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4))
    auth = BasicAuth({"admin": slow, "ci": fast})
    known = {"admin": _seconds(auth, "admin", 3), "ci": _seconds(auth, "ci", 7)}
    spread = known["admin"] / known["ci"]
    assert spread > 10  # the two costs are far apart on this machine
    margin = spread ** 0.4
    nearest: dict[str, str] = {}
    for i in range(16):
        name = f"guess-{i}"
        took = _seconds(auth, name, 3)
        match, ratio = min(((k, max(took, v) / min(took, v)) for k, v in known.items()),
                           key=lambda kv: kv[1])
        assert ratio < margin, (name, took, known)
        nearest[name] = match
    assert set(nearest.values()) == {"admin", "ci"}, nearest


# ------------------------------------------------------------------ the bcrypt queue


def _checked_in_order(limit: int, arrivals: list[tuple[str, bytes]]
                      ) -> tuple[list[bytes], list[bool | None]]:
    """Checks from (address, secret) arrivals made together: the order bcrypt ran them in
    and each arrival's verdict (None: given up for room)."""
    ran: list[bytes] = []

    def run(secret: bytes, hashed: bytes) -> bool:
        ran.append(secret)
        return secret == hashed

    async def main() -> list[bool | None]:
        queue = web._FairBcryptQueue(run, limit)
        try:
            return list(await asyncio.gather(*(queue.check(peer, secret, b"right")
                                               for peer, secret in arrivals)))
        finally:
            queue.close()

    verdicts = asyncio.run(main())
    return ran, verdicts


def test_checks_are_taken_round_robin_over_client_addresses() -> None:
    """Ten guesses from each of two addresses arrive first; the scraper's check, from a third
    address, is the third one run, not the twenty-first."""
    arrivals = [(peer, f"{peer}-{i}".encode()) for i in range(10) for peer in ("a", "b")]
    ran, verdicts = _checked_in_order(64, [*arrivals, ("scraper", b"right")])
    assert ran.index(b"right") == 2, ran
    assert verdicts == [False] * 20 + [True]
    assert [s for s in ran if s.startswith(b"a-")] == [f"a-{i}".encode() for i in range(10)]


def test_when_the_queue_is_full_the_busiest_address_gives_up_its_oldest_check() -> None:
    arrivals = [("a", b"a-0"), ("a", b"a-1"), ("a", b"a-2"), ("b", b"b-0"), ("a", b"a-3"),
                ("scraper", b"right")]
    ran, verdicts = _checked_in_order(4, arrivals)
    # Full at four waiting: a-3 pushes out a-0, the scraper pushes out a-1 (a is busiest).
    assert verdicts == [None, None, False, False, False, True]
    assert b"a-0" not in ran and b"a-1" not in ran and b"right" in ran
