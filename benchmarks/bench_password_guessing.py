"""/metrics behind basic auth while clients guess passwords.

The real exporter (`python -m exporter serve`, a web config with one bcrypt user of cost
10, a cluster that does not answer) is started afresh for each phase, so the authorised
scraper's first scrape needs a bcrypt check of its own; it then scrapes every
`--scrape-every` seconds for `--seconds` (a new connection each time, as the worst case).
Phases: `alone` (the baseline), then `guessing`: `--guessers` clients sending wrong
passwords on kept-alive connections as fast as they are answered, from `--guess-addresses`
other loopback addresses, started before the scraper's first scrape. Reports per phase: the
first scrape's latency, the later scrapes' p50/p99/max and how many were answered within 1 s,
the guesses answered 401 / 503, and the exporter's CPU (cores) during the phase.

Run: python benchmarks/bench_password_guessing.py
     python benchmarks/bench_password_guessing.py --guessers 8 --seconds 3   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import bcrypt

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common
import bench_scrape_load as load

USER, PASSWORD = "prometheus", "right-password"
ANSWERED_WITHIN_SECONDS = 1.0
SCRAPE_TIMEOUT_SECONDS = 10.0


def _basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"{USER}:{password}".encode()).decode()


class _Guessers:
    def __init__(self, port: int, count: int, addresses: list[str]) -> None:
        self._port, self._count, self._addresses = port, count, addresses
        self._stop = threading.Event()
        self.statuses: Counter[int] = Counter()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> _Guessers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _run(self) -> None:
        await asyncio.gather(*(self._guess(self._addresses[i % len(self._addresses)])
                               for i in range(self._count)))

    async def _guess(self, source: str) -> None:
        while not self._stop.is_set():
            writer = None
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", self._port, local_addr=(source, 0)), 5)
                while not self._stop.is_set():
                    writer.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                 f"{_basic(secrets.token_hex(8))}\r\n\r\n".encode())
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:"))
                    await reader.readexactly(length)
                    self.statuses[int(head.split(b" ", 2)[1])] += 1
                    if b"connection: close" in head.lower():
                        break
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError,
                    StopIteration):
                pass
            finally:
                if writer is not None:
                    writer.close()


def _scrape(url: str) -> float:
    """Seconds to a 200 (inf: no answer within the timeout, or another status)."""
    began = time.perf_counter()
    request = urllib.request.Request(url, headers={"Authorization": _basic(PASSWORD)})
    try:
        with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_SECONDS) as resp:
            ok = resp.status == 200 and b"kafka_txn_exporter_up" in resp.read()
    except OSError:
        ok = False
    return time.perf_counter() - began if ok else float("inf")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ms(seconds: float) -> float | None:
    return None if seconds == float("inf") else round(1000 * seconds, 1)


def _phase(web_config: str, seconds: float, every: float, guessers: int,
           addresses: list[str]) -> dict[str, Any]:
    with load.exporter_process("127.0.0.1:1", 30.0, web_config) as (url, pid):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with _Guessers(port, guessers, addresses) as guess:
            deadline = time.monotonic() + 60
            while guessers and not guess.statuses and time.monotonic() < deadline:
                time.sleep(0.05)  # the first guesses are being checked
            cpu, wall = _cpu_seconds(pid), time.monotonic()
            first = _scrape(url)
            later: list[float] = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                took = _scrape(url)
                later.append(took)
                time.sleep(max(0.0, every - took) if took != float("inf") else 0.0)
            cores = (_cpu_seconds(pid) - cpu) / (time.monotonic() - wall)
            statuses = dict(guess.statuses)
    later.sort()
    return {
        "first_scrape_ms": _ms(first),
        "scrapes": len(later),
        "answered_within_1s": sum(t <= ANSWERED_WITHIN_SECONDS for t in later),
        "p50_ms": _ms(statistics.median(later)),
        "p99_ms": _ms(later[int(0.99 * (len(later) - 1))]),
        "max_ms": _ms(later[-1]),
        "guesses_by_status": statuses,
        "exporter_cores": round(cores, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--guessers", type=int, default=48)
    parser.add_argument("--guess-addresses", default="127.0.0.2,127.0.0.3")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--scrape-every", type=float, default=0.25)
    parser.add_argument("--cost", type=int, default=10, help="bcrypt cost of the user's hash")
    args = parser.parse_args()
    addresses = args.guess_addresses.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        web_config = Path(tmp) / "web.yml"
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(args.cost)).decode()
        web_config.write_text(f"basic_auth_users: {{{USER}: '{hashed}'}}\n")
        alone = _phase(str(web_config), args.seconds, args.scrape_every, 0, addresses)
        guessing = _phase(str(web_config), args.seconds, args.scrape_every, args.guessers,
                          addresses)
    common.emit({
        "benchmark": "password_guessing",
        "bcrypt_cost": args.cost,
        "guessers": args.guessers,
        "guess_addresses": addresses,
        "alone": alone,
        "guessing": guessing,
        "ratio_p50": common.ratio(guessing["p50_ms"], alone["p50_ms"])
        if guessing["p50_ms"] is not None and alone["p50_ms"] is not None else None,
        "machine": common.machine_info(),
        "load_average": common.load_average(),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
