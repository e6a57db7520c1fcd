"""/metrics under concurrent scrapers while polls run: latency percentiles and errors.

Processes (each number belongs to one side only):
- the simulated cluster (`--serve-sim`): 3 brokers, a 2,000-partition topic, N late (hanging)
  transactions on distinct partitions (default 1,000) plus some young open ones;
- the real exporter (`python -m exporter serve`, port 0 on 127.0.0.1), polling every
  `--poll-interval` seconds, so polls run during the load;
- the load generator (`--load`): asyncio, `--concurrency` scrapers each looping
  connect -> GET /metrics -> read to EOF, for `--seconds`; every answer is checked (status 200,
  Content-Length = body length, the body holds the late series).

Baseline: the same scrape with a single scraper (`--baseline-seconds`), in the same run. The
result line carries p50/p90/p99/max latency for both, the ratios, the exporter's CPU seconds
and polls completed during each phase, and the machine.

Run: python benchmarks/bench_scrape_load.py                       # 50 scrapers x 30 s
     python benchmarks/bench_scrape_load.py --gzip                 # as Prometheus asks
     python benchmarks/bench_scrape_load.py --tls-auth             # HTTPS + basic auth
     python benchmarks/bench_scrape_load.py --late 50 --seconds 3 --baseline-seconds 2  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common

SCRIPT = Path(__file__).resolve()
TOPIC = "late"
SCRAPE_TIMEOUT_SECONDS = 10.0
"""Prometheus' default scrape_timeout."""
PARTITIONS = 2000


# -- the simulated cluster (its own process) --------------------------------------------------


def serve_sim(late: int, young: int) -> int:
    from kafka_sim.cluster import SimCluster
    from kafka_sim.seed import seed_hanging_transaction, seed_open_transaction

    sim = SimCluster(brokers=3, topics={TOPIC: PARTITIONS},
                     broker_config={"transaction.max.timeout.ms": "60000"}).start()
    now = int(sim.clock.now_ms())

    def seed(state: Any) -> None:
        for i in range(late):
            seed_hanging_transaction(state, f"load-hang-{i}", TOPIC, i % PARTITIONS,
                                     last_timestamp_ms=now - 3_600_000 - i * 1000)
        for i in range(young):
            seed_open_transaction(state, f"load-open-{i}", [(TOPIC, (late + i) % PARTITIONS)],
                                  start_ms=now - 5_000, timeout_ms=60_000)

    sim.call(seed, sim.state)
    return common.serve_until_stdin_closes({"bootstrap": sim.bootstrap_servers}, sim.close)


@contextmanager
def sim_process(late: int, young: int) -> Iterator[dict[str, Any]]:
    with common.serving_child(
        SCRIPT, ["--serve-sim", "--late", str(late), "--young", str(young)]
    ) as ready:
        yield ready


# -- the exporter (its own process) -----------------------------------------------------------


@contextmanager
def exporter_process(bootstrap: str, poll_interval: float,
                     web_config: str | None = None) -> Iterator[tuple[str, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTE_")}
    if web_config:
        env["KTE_WEB_CONFIG_FILE"] = web_config
    env.update(KTE_CLUSTER_NAME="load", KTE_CLUSTER_BOOTSTRAP_SERVERS=bootstrap,
               KTE_CLUSTER_POLL_INTERVAL_SECONDS=str(poll_interval),
               KTE_CLUSTER_LATE_BUFFER_SECONDS="10", KTE_CLUSTER_MIN_REPORTED_DURATION_SECONDS="0",
               KTE_LOG_FORMAT="json", KTE_LOG_LEVEL="warning")
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--web.listen-address", "127.0.0.1",
         "--web.port", "0", "--log.level", "info"],
        env=env, cwd=common.REPO_ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True)
    drain: subprocess.Popen[bytes] | None = None
    try:
        assert proc.stderr is not None
        url = common.read_listen_url(proc)
        drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if drain is not None:
            drain.wait(timeout=5)


AUTH: dict[str, Any] = {}
"""With --tls-auth: the client's SSLContext ("context") and Authorization header ("header")."""


def scrape_text(url: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": AUTH["header"]}
                                     if AUTH else {})
    with urllib.request.urlopen(request, timeout=30, context=AUTH.get("context")) as resp:
        return str(resp.read().decode())


def tls_auth_setup(directory: Path) -> tuple[str, Any, str]:
    """A CA-signed server cert for 127.0.0.1, a bcrypt (cost 10) user, the web config file.
    Returns (web config path, client SSLContext, Authorization header)."""
    import base64
    import datetime as dt
    import ipaddress
    import ssl

    import bcrypt
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (directory / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    password = "bench-password"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()
    config = directory / "web.yml"
    config.write_text("tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
                      f"basic_auth_users: {{prometheus: '{hashed}'}}\n")
    context = ssl.create_default_context(cafile=str(directory / "server.crt"))
    header = "Basic " + base64.b64encode(f"prometheus:{password}".encode()).decode()
    return str(config), context, header


def metric_sum(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))


# -- the load generator (its own process) -----------------------------------------------------


async def _scrape(host: str, port: int, path: str, gzip: bool) -> tuple[float, str | None, int]:
    """(seconds, error or None, body bytes) of one scrape on a fresh connection (TLS
    handshake and authentication included with --tls-auth)."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=AUTH.get("context"))
        accept = "Accept-Encoding: gzip\r\n" if gzip else ""
        if AUTH:
            accept += f"Authorization: {AUTH['header']}\r\n"
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{accept}"
                     "Connection: close\r\n\r\n".encode())
        data = await reader.read(-1)
        writer.close()
    except (OSError, asyncio.IncompleteReadError) as exc:
        return time.perf_counter() - started, type(exc).__name__, 0
    elapsed = time.perf_counter() - started
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if not lines[0].startswith(b"HTTP/1.") or lines[0].split(b" ")[1] != b"200":
        return elapsed, f"status {lines[0][:40]!r}", len(body)
    length = next((int(h.split(b":", 1)[1]) for h in lines[1:]
                   if h.lower().startswith(b"content-length:")), None)
    if length is not None and length != len(body):
        return elapsed, "short body", len(body)
    if not gzip and b"kafka_late_transaction_age_seconds{" not in body:
        return elapsed, "no late series", len(body)
    return elapsed, None, len(body)


async def _load(url: str, concurrency: int, seconds: float, gzip: bool) -> dict[str, Any]:
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.rpartition(":")
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sizes: list[int] = []
    end = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < end:
            started = time.perf_counter()
            try:
                elapsed, error, size = await asyncio.wait_for(
                    _scrape(host, int(port), "/" + path, gzip), SCRAPE_TIMEOUT_SECONDS)
            except TimeoutError:
                elapsed, error, size = time.perf_counter() - started, "timeout", 0
            if error is None:
                latencies.append(elapsed)
                sizes.append(size)
            else:
                errors[error] = errors.get(error, 0) + 1

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - began
    latencies.sort()

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 2)

    return {
        "concurrency": concurrency,
        "seconds": round(wall, 2),
        "scrapes": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "scrapes_per_second": round(len(latencies) / wall, 1),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(latencies[-1] * 1000, 2) if latencies else None,
        "mean_ms": round(statistics.fmean(latencies) * 1000, 2) if latencies else None,
        "body_bytes": sizes[0] if sizes else 0,
    }


def load_child(url: str, concurrency: int, seconds: float, gzip: bool,
               web_dir: str | None) -> int:
    if web_dir:
        _, AUTH["context"], AUTH["header"] = tls_auth_setup_client(Path(web_dir))
    common.emit(asyncio.run(_load(url, concurrency, seconds, gzip)))
    return 0


def tls_auth_setup_client(directory: Path) -> tuple[None, Any, str]:
    """The load child's side of tls_auth_setup (same files, same password)."""
    import base64
    import ssl

    context = ssl.create_default_context(cafile=str(directory / "server.crt"))
    header = "Basic " + base64.b64encode(b"prometheus:bench-password").decode()
    return None, context, header


def run_load(url: str, concurrency: int, seconds: float, gzip: bool, pid: int,
             web_dir: str | None = None) -> dict[str, Any]:
    """One phase: the load child, plus the exporter's CPU and polls during it."""
    before = scrape_text(url)
    cpu_before = _cpu_seconds_of(pid)
    args = ["--load", "--url", url, "--concurrency", str(concurrency),
            "--seconds", str(seconds)] + (["--gzip"] if gzip else []) + (
        ["--web-dir", web_dir] if web_dir else [])
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=seconds + 120, cwd=common.REPO_ROOT, check=False)
    results = common.parse_results(proc.stdout)
    if proc.returncode != 0 or len(results) != 1:
        raise RuntimeError(f"load child failed: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result = results[0]
    after = scrape_text(url)
    count = "kafka_txn_exporter_poll_duration_seconds_count{"
    total = "kafka_txn_exporter_poll_duration_seconds_sum{"
    polls = metric_sum(after, count) - metric_sum(before, count)
    result["exporter_cpu_seconds"] = round(_cpu_seconds_of(pid) - cpu_before, 2)
    result["polls_during"] = int(polls)
    result["mean_poll_seconds_during"] = (
        round((metric_sum(after, total) - metric_sum(before, total)) / polls, 3)
        if polls else None)
    result["exporter_up_after"] = metric_sum(after, "kafka_txn_exporter_up{")
    return result


def _cpu_seconds_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib_of(pid: int) -> float:
    return round(common.proc_status_kib("VmRSS", path=f"/proc/{pid}/status") / 1024, 1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--baseline-seconds", type=float, default=10.0)
    parser.add_argument("--late", type=int, default=1000, help="late (hanging) transactions")
    parser.add_argument("--young", type=int, default=200, help="young open transactions")
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--gzip", action="store_true", help="send Accept-Encoding: gzip")
    parser.add_argument("--tls-auth", action="store_true",
                        help="HTTPS + basic auth (bcrypt cost 10) via a web config file; every "
                             "scrape is a new TLS connection")
    parser.add_argument("--web-dir", help=argparse.SUPPRESS)
    parser.add_argument("--serve-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_sim:
        return serve_sim(args.late, args.young)
    if args.load:
        return load_child(args.url, args.concurrency, args.seconds, args.gzip, args.web_dir)

    machine = common.machine_info()
    web_dir = tempfile.mkdtemp(prefix="bench-scrape-") if args.tls_auth else None
    web_config = None
    if web_dir:
        web_config, AUTH["context"], AUTH["header"] = tls_auth_setup(Path(web_dir))
    with sim_process(args.late, args.young) as sim, \
            exporter_process(sim["bootstrap"], args.poll_interval, web_config) as (url, pid):
        deadline = time.monotonic() + 60
        while True:
            text = scrape_text(url)
            late_series = text.count("kafka_late_transaction_age_seconds{")
            if late_series >= args.late or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if late_series < args.late:
            raise RuntimeError(f"only {late_series} late series after 60 s")
        baseline = run_load(url, 1, args.baseline_seconds, args.gzip, pid, web_dir)
        loaded = run_load(url, args.concurrency, args.seconds, args.gzip, pid, web_dir)
        rss = _rss_mib_of(pid)
    if web_dir:
        shutil.rmtree(web_dir, ignore_errors=True)
    result = {
        "bench": "scrape_load",
        "machine": machine,
        "late_transactions": args.late,
        "young_open_transactions": args.young,
        "late_series": late_series,
        "metrics_lines": text.count("\n"),
        "gzip": args.gzip,
        "tls_basic_auth": args.tls_auth,
        "poll_interval_seconds": args.poll_interval,
        "baseline": baseline,
        "load": loaded,
        "p50_ratio": common.ratio(loaded["p50_ms"] or 0, baseline["p50_ms"] or 0),
        "p99_ratio": common.ratio(loaded["p99_ms"] or 0, baseline["p99_ms"] or 0),
        "exporter_rss_mib_after": rss,
    }
    common.emit(result)
    for name, r in (("baseline x1", baseline), (f"load x{args.concurrency}", loaded)):
        print(f"{name:>12}: {r['scrapes']} scrapes in {r['seconds']} s "
              f"({r['scrapes_per_second']}/s), errors {r['errors']}, p50 {r['p50_ms']} ms, "
              f"p90 {r['p90_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms, "
              f"body {r['body_bytes']} B, exporter CPU {r['exporter_cpu_seconds']} s, "
              f"polls {r['polls_during']} (mean {r['mean_poll_seconds_during']} s)")
    print(f"ratios: p50 x{result['p50_ratio']}, p99 x{result['p99_ratio']}; "
          f"late series {late_series}, exporter RSS {rss} MiB")
    return 0 if loaded["errors"] == 0 and baseline["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
