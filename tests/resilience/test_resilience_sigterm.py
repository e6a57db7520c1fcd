"""SIGTERM stops the real `serve` process cleanly (exit 0) within 5 s while it is busy: a poll
stuck in a slow request with scrapers hammering /metrics, or every broker refusing connections.
(tests/test_e2e_serve.py covers an idle exporter and a stuck poll without scrapers.)"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable

import pytest
from kafka_sim.cluster import SimCluster

from resilience.harness import ServeProcess, clean_env

pytestmark = pytest.mark.slow  # exporter processes under load, waits for SIGTERM handling


def hammer(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                resp.read()
        except OSError:
            pass  # the server is going away: expected at the end


def slow_everything(sim: SimCluster) -> None:
    sim.set_latency(30_000)


def every_broker_down(sim: SimCluster) -> None:
    for broker in sim.node_ids:
        sim.stop_broker(broker)


@pytest.mark.parametrize("fault", [slow_everything, every_broker_down])
def test_sigterm_while_busy_exits_cleanly_within_5_seconds(
    fault: Callable[[SimCluster], None]
) -> None:
    with SimCluster(brokers=2, topics={"t": 2}) as sim:
        fault(sim)
        proc = ServeProcess(
            ["serve", "--web.listen-address", "127.0.0.1", "--web.port", "0"],
            clean_env(KTE_CLUSTER_BOOTSTRAP_SERVERS=sim.bootstrap_servers,
                      KTE_CLUSTER_POLL_INTERVAL_SECONDS="0.5",
                      KTE_CLUSTER_REQUEST_TIMEOUT_SECONDS="60"))
        stop = threading.Event()
        scrapers = []
        try:
            scraper = proc.wait_started()
            scrapers = [threading.Thread(target=hammer, args=(scraper.base + "/metrics", stop))
                        for _ in range(8)]
            for t in scrapers:
                t.start()
            scraper.wait_for(lambda: scraper.get("/readyz")[0] == 503, "serving, not ready")
        finally:
            code, elapsed = proc.stop()
            stop.set()
            for t in scrapers:
                t.join(timeout=5)
    assert code == 0, proc.output[-2000:]
    assert elapsed < 5.0
    assert '"exporter_stopped"' in proc.output
    assert "Traceback" not in proc.output
