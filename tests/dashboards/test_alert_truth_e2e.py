"""A page is true at every moment, end to end with real processes: a 3-broker
`SimCluster`; `kafka-txn-exporter serve` as child processes on fixed loopback ports (killed,
restarted in place, rolled out to another port); the Debian `prometheus` scraping both ports
every second and evaluating the generated rules every second; the Debian `alertmanager`
sending every alert to a webhook in this process.

One hanging transaction (a transactional Produce the coordinator never heard of, late 3 s after
it is written with transaction.max.timeout.ms = 2000 and late_buffer_seconds = 1) makes both
KafkaHangingTransaction and KafkaOrphanedTransaction fire (orphaned needs two polls after the one
that first saw it). Then, in order, for that transaction:

(c) the exporter is SIGKILLed and restarted in place, SIGTERMed and restarted, and rolled out
    (a new process on the other port, then SIGTERM to the old one): while Prometheus' own
    /api/v1/alerts is sampled every 0.25 s, both alerts stay firing at every sample, through
    the restarted process' first polls, before its orphan detection is warm, and after; no
    resolved notification arrives;
(d) it is aborted with the command the status page prints: both alerts resolve (measured:
    abort -> resolved notification);
(b) the only exporter is then SIGKILLed: for 20 s neither alert is pending or firing again for
    it, and no new firing notification arrives.
(a) A second hanging transaction pages; every exporter is stopped (SIGTERM): both alerts keep
    firing at every sample for HELD_SECONDS (longer than any time-bound hold this test once
    used), and no resolved notification arrives: with nobody polling, the state is unknown,
    not resolved.

The rules are the generated ones with `for:` 1 s (`--set`); production waits `for:` 1m/5m.
The mechanism: docs/runbook.md#when-a-page-resolves.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from exporterproc import ExporterProcess, free_port
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction
from promstack import Alertmanager, Notification, Prometheus, WebhookReceiver, stopping
from waits import SUBPROCESS_HANG_S, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.system_tools]  # prometheus, alertmanager

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "truth"
TOPIC = "payments"
TRANSACTION_MAX_TIMEOUT_MS = 2000
HELD_SECONDS = 50
PAGES = ("KafkaHangingTransaction", "KafkaOrphanedTransaction")
WAIT_SECONDS = 60.0
SAMPLE_SECONDS = 0.25
COMMAND = re.compile(r'<code class="cmd">(.*?)</code>', re.S)


def _wait(what: str, check: Any, timeout_seconds: float = WAIT_SECONDS) -> Any:
    return wait_for(what, check, timeout_seconds)


@dataclass
class Stack:
    sim: SimCluster
    prometheus: Prometheus
    webhook: WebhookReceiver
    exporters: dict[str, ExporterProcess]

    def active_alerts(self) -> list[dict[str, Any]]:
        """Prometheus' own alert states right now (pending and firing), from /api/v1/alerts."""
        with urllib.request.urlopen(f"{self.prometheus.url}/api/v1/alerts", timeout=5) as r:
            body = json.load(r)
        alerts: list[dict[str, Any]] = body["data"]["alerts"]
        return alerts

    def states(self, start_offset: int) -> dict[str, str]:
        """alertname -> state of the page alerts for the transaction at `start_offset`."""
        return {
            a["labels"]["alertname"]: a["state"]
            for a in self.active_alerts()
            if a["labels"].get("alertname") in PAGES
            and a["labels"].get("start_offset") == str(start_offset)
        }

    def notifications(
        self, start_offset: int, status: str, since: float, alertname: str | None = None
    ) -> list[Notification]:
        return [
            n for n in self.webhook.notifications
            if n.received_at >= since and any(
                a["status"] == status
                and a["labels"].get("alertname") in ((alertname,) if alertname else PAGES)
                and a["labels"].get("start_offset") == str(start_offset)
                for a in n.alerts
            )
        ]  # fmt: skip

    def wait_notification(
        self, start_offset: int, status: str, alertname: str, since: float,
        timeout_seconds: float = WAIT_SECONDS,
    ) -> Notification:
        found = self.webhook.wait_for(
            lambda n: n in self.notifications(start_offset, status, since, alertname),
            timeout_seconds,
        )
        assert found is not None, (
            f"no {status} {alertname} for start offset {start_offset}; got "
            f"{[(n.status, [a['labels'] for a in n.alerts]) for n in self.webhook.notifications]}"
        )
        return found

    def warm(self, exporter: ExporterProcess) -> bool:
        return bool(self.prometheus.query(
            f'kafka_txn_exporter_orphan_detection_warm{{instance="127.0.0.1:{exporter.port}"}}'
            " == 1"
        ))

    def live(self, exporter: ExporterProcess, start_offset: int) -> bool:
        return bool(self.prometheus.query(
            f'kafka_orphaned_transaction_age_seconds{{instance="127.0.0.1:{exporter.port}",'
            f'start_offset="{start_offset}"}}'
        ))

    def scraped_down(self, exporter: ExporterProcess) -> bool:
        return bool(self.prometheus.query(f'up{{instance="127.0.0.1:{exporter.port}"}} == 0'))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("truth")
    generated = work / "generated"
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.generate", "--out-dir", str(generated),
         *(arg for alert in ("KafkaLateTransactions", *PAGES)
           for arg in ("--set", f"{alert}.for=1s"))],
        cwd=REPO, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    sim = SimCluster(
        brokers=3,
        topics={TOPIC: 3},
        broker_config={
            "transaction.max.timeout.ms": str(TRANSACTION_MAX_TIMEOUT_MS),
            "transaction.partition.verification.enable": "false",
        },
    ).start()
    config = {
        "clusters": [{
            "name": CLUSTER, "bootstrap_servers": sim.bootstrap_servers.split(","),
            "poll_interval_seconds": 1, "request_timeout_seconds": 2,
            "late_buffer_seconds": 1, "min_reported_duration_seconds": 0,
        }],
        "admin": {"clusters": [{"name": CLUSTER}]},
    }  # fmt: skip
    exporters = {
        name: ExporterProcess(work / "exporters", name, free_port(), config) for name in "ab"
    }
    webhook = WebhookReceiver()
    alertmanager = Alertmanager(work / "alertmanager", webhook.url)
    prometheus = Prometheus(
        work / "prometheus",
        targets=[f"127.0.0.1:{e.port}" for e in exporters.values()],
        rule_files=[generated / "alerts" / "rules.yaml"],
        alertmanager=alertmanager.address,
    )
    with stopping(sim, webhook, alertmanager, prometheus):
        try:
            yield Stack(sim, prometheus, webhook, exporters)
        finally:
            for exporter in exporters.values():
                exporter.stop(signal.SIGKILL)


def _watch_firing(
    stack: Stack, start_offset: int, until: Callable[[], bool], timeout_seconds: float
) -> tuple[int, list[tuple[float, dict[str, str]]]]:
    """Sample Prometheus' alert states until `until()`; returns the number of samples and
    those where a page alert for the transaction was not firing."""
    gaps: list[tuple[float, dict[str, str]]] = []
    samples = 0
    started = time.monotonic()
    while True:
        states = stack.states(start_offset)
        samples += 1
        if any(states.get(name) != "firing" for name in PAGES):
            gaps.append((time.monotonic() - started, states))
        if until():
            return samples, gaps
        assert time.monotonic() - started < timeout_seconds, f"watch timed out; gaps {gaps}"
        time.sleep(SAMPLE_SECONDS)


def _abort_command(exporter: ExporterProcess, start_offset: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/", timeout=5) as r:
        page = r.read().decode("utf-8")
    commands = [html.unescape(c) for c in COMMAND.findall(page)]
    (command,) = [c for c in commands if f"--start-offset {start_offset}" in c]
    return command


def test_a_page_is_true_through_restarts_abort_and_the_exporter_stopping(stack: Stack) -> None:
    a, b = stack.exporters["a"], stack.exporters["b"]
    a.start()
    _wait("exporter a to be warm in Prometheus", lambda: stack.warm(a))
    _, _, offset = hanging_transaction(stack.sim.bootstrap_servers, "truth-1", TOPIC, 0,
                                       transaction_timeout_ms=TRANSACTION_MAX_TIMEOUT_MS)
    made = time.time()
    for name in PAGES:
        stack.wait_notification(offset, "firing", name, since=made)
    report = [f"pages for the hanging transaction fired {time.time() - made:.1f} s after it "
              "was written (late after 3 s; orphaned after 2 more polls)"]

    # (c) restarts resolve nothing still true -----------------------------------------------
    def restart_in_place(sig: signal.Signals) -> None:
        since = time.time()
        a.stop(sig)
        _wait("Prometheus to see exporter a down", lambda: stack.scraped_down(a))
        down_at = time.time()
        a.start()
        samples, gaps = _watch_firing(
            stack, offset,
            lambda: stack.warm(a) and stack.live(a, offset) and time.time() > down_at + 1,
            WAIT_SECONDS,
        )
        settle_until = time.time() + 3  # a few evaluations after the orphan is live again
        more, late_gaps = _watch_firing(stack, offset, lambda: time.time() > settle_until, 10)
        assert gaps + late_gaps == [], f"{sig.name} restart: pages not firing at {gaps}"
        assert stack.notifications(offset, "resolved", since) == []
        report.append(f"{sig.name} + restart in place: both pages firing at all {samples + more} "
                      f"samples over {time.time() - since:.1f} s; no resolved notification")

    restart_in_place(signal.SIGKILL)
    restart_in_place(signal.SIGTERM)

    since = time.time()
    b.start()  # a rollout: the new pod first, then the old one goes
    _wait("exporter b to be warm", lambda: stack.warm(b))
    assert a.stop(signal.SIGTERM) == 0
    samples, gaps = _watch_firing(
        stack, offset, lambda: stack.scraped_down(a) and time.time() > since + 8, WAIT_SECONDS
    )
    assert gaps == [], f"rollout: pages not firing at {gaps}"
    assert stack.notifications(offset, "resolved", since) == []
    report.append(f"rollout (new process on another port, SIGTERM to the old): both pages firing "
                  f"at all {samples} samples over {time.time() - since:.1f} s")

    # (d) the abort resolves at the next evaluation ------------------------------------------
    command = _abort_command(b, offset)
    aborted_at = time.time()
    done = subprocess.run([*shlex.split(command), "--yes"], capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    resolved = [stack.wait_notification(offset, "resolved", name, since=aborted_at)
                for name in PAGES]
    latest = max(n.received_at for n in resolved)
    report.append("abort (the status page's command) -> resolved notifications: " + ", ".join(
        f"{name} {n.received_at - aborted_at:.1f} s" for name, n in zip(PAGES, resolved,
                                                                        strict=True)))

    # (b) ... and never pages again when the exporter stops afterwards ----------------------
    assert b.stop(signal.SIGKILL) == -signal.SIGKILL
    stopped_at = time.time()
    _wait("Prometheus to see exporter b down", lambda: stack.scraped_down(b))
    seen: list[dict[str, str]] = []
    while time.time() < stopped_at + 20:
        states = stack.states(offset)
        if states:
            seen.append(states)
        time.sleep(SAMPLE_SECONDS)
    assert seen == [], "an aborted transaction's page came back after the exporter stopped"
    assert stack.notifications(offset, "firing", since=latest) == []
    report.append("exporter SIGKILLed right after the abort resolved: no page pending or firing "
                  "again in the 20 s after")

    # (a) every exporter stopped: the page holds, with no time limit ------------------------
    a.start()
    _wait("exporter a to be warm again", lambda: stack.warm(a))
    _, _, second = hanging_transaction(stack.sim.bootstrap_servers, "truth-2", TOPIC, 1,
                                       transaction_timeout_ms=TRANSACTION_MAX_TIMEOUT_MS)
    made = time.time()
    for name in PAGES:
        stack.wait_notification(second, "firing", name, since=made)
    assert a.stop(signal.SIGTERM) == 0
    stopped_at = time.time()
    samples, gaps = _watch_firing(stack, second,
                                  lambda: time.time() > stopped_at + HELD_SECONDS, 120)
    assert gaps == [], f"all exporters stopped: pages not firing at {gaps}"
    assert stack.notifications(second, "resolved", stopped_at) == []
    report.append(f"every exporter stopped (SIGTERM): both pages firing at all {samples} samples "
                  f"for {time.time() - stopped_at:.1f} s after the stop; no resolved "
                  "notification (state unknown, not resolved)")
    print("\nALERT TRUTH E2E:\n  " + "\n  ".join(report))
