"""A real Prometheus, a real Alertmanager and a webhook receiver on loopback, for end-to-end tests.

Prometheus and Alertmanager are the Debian packages' binaries (`prometheus`,
`prometheus-alertmanager`; scripts/install-test-deps installs them). Each is started directly
on 127.0.0.1 port 0 with a temporary config and storage directory; the port it really bound is
read from its "Listening on" log line. Processes are stopped by their own handle only.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

LISTENING = re.compile(r'msg="Listening on" address=(?:\[[^\]]*\]|[^\s:]+):(\d+)')
START_TIMEOUT_SECONDS = 20.0


def binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(
        f"none of {names} found: run scripts/install-test-deps "
        "(Debian packages prometheus, prometheus-alertmanager)"
    )


class _Process:
    """One child process whose log goes to a file; knows the port it listens on."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            list(argv), stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.port = self._wait_for_port()

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            match = LISTENING.search(self.log_text())
            if match:
                return int(match.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"{self.name} did not start:\n{self.log_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class Prometheus:
    """`prometheus` scraping `targets` every second and evaluating `rule_files` every second."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        rule_files: Sequence[Path] = (),
        alertmanager: str | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "kafka-txn-exporter",
                    "scrape_timeout": "1s",
                    "static_configs": [{"targets": list(targets)}],
                }
            ],
        }
        if rule_files:
            config["rule_files"] = [str(p) for p in rule_files]
        if alertmanager:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]
            }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self._process = _Process(
            "prometheus",
            [
                binary("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                "--web.listen-address=127.0.0.1:0",
                # Send a firing alert again every second (default 1m) so a test never waits
                # on Prometheus' resend cycle.
                "--rules.alert.resend-delay=1s",
                "--log.level=info",
            ],
            workdir / "prometheus.log",
        )
        self.url = f"http://127.0.0.1:{self._process.port}"
        self._wait_ready()

    def _wait_ready(self, timeout_seconds: float = 60.0) -> None:
        """Prometheus binds its port before its TSDB is open and answers 503 until then."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus not ready:\n{self.log_text()[-2000:]}")
            time.sleep(0.1)

    def log_text(self) -> str:
        return self._process.log_text()

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        body = _get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> Any:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        body = _get_json(f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return body["data"]["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        params = urllib.parse.urlencode({"match[]": match})
        body = _get_json(f"{self.url}/api/v1/label/{label}/values?{params}")
        assert body["status"] == "success", body
        values: list[str] = body["data"]
        return values

    def rule_health(self) -> list[tuple[str, str, str]]:
        body = _get_json(f"{self.url}/api/v1/rules")
        return [
            (rule["name"], rule["health"], rule.get("lastError", ""))
            for group in body["data"]["groups"]
            for rule in group["rules"]
        ]

    def stop(self) -> None:
        self._process.stop()


class Alertmanager:
    """`alertmanager` routing every alert, one notification per alert, to a webhook."""

    def __init__(self, workdir: Path, webhook_url: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "route": {
                "receiver": "webhook",
                "group_by": ["..."],  # every alert is its own group: one notification each
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "webhook",
                    "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
                }
            ],
        }
        config_path = workdir / "alertmanager.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self._process = _Process(
            "alertmanager",
            [
                binary("prometheus-alertmanager", "alertmanager"),
                f"--config.file={config_path}",
                f"--storage.path={workdir / 'data'}",
                "--web.listen-address=127.0.0.1:0",
                "--cluster.listen-address=",  # no gossip port: a single, local instance
                "--log.level=info",
            ],
            workdir / "alertmanager.log",
        )
        self.address = f"127.0.0.1:{self._process.port}"

    def log_text(self) -> str:
        return self._process.log_text()

    def stop(self) -> None:
        self._process.stop()


@dataclass(frozen=True, slots=True)
class Notification:
    """One webhook call from Alertmanager and when it arrived (time.time())."""

    received_at: float
    payload: dict[str, Any]

    @property
    def status(self) -> str:
        status: str = self.payload["status"]
        return status

    @property
    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.payload["alerts"]
        return alerts


class WebhookReceiver:
    """Alertmanager webhook endpoint on 127.0.0.1 port 0 that records every notification."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length))
                with receiver._changed:
                    receiver.notifications.append(Notification(time.time(), payload))
                    receiver._changed.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook", daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"

    def wait_for(
        self, predicate: Callable[[Notification], bool], timeout_seconds: float
    ) -> Notification | None:
        """The first notification (old or new) matching `predicate`, or None on timeout."""
        deadline = time.monotonic() + timeout_seconds
        with self._changed:
            while True:
                for notification in self.notifications:
                    if predicate(notification):
                        return notification
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def stopping(*things: Any) -> Iterator[None]:
    """Stop every started thing in reverse order, even when one stop fails."""
    try:
        yield
    finally:
        for thing in reversed(things):
            with contextlib.suppress(Exception):
                thing.stop()
