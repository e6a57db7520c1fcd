"""Logging: JSON lines, console mode, redaction of secret-looking keys, the per-poll summary."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
import time

import pytest
from exporter_factories import broker, in_thread, observation, snapshot

from exporter.logs import REDACTED, configure_logging, get_logger, resolve_format
from exporter.scheduler import ClusterJob, PollScheduler
from exporter.settings import ClusterSettings
from exporter.snapshots import SnapshotStore

pytestmark = pytest.mark.usefixtures("reset_logging")  # tests/conftest.py


def test_json_lines_with_redaction() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    get_logger("t").info("connecting", sasl_password="hunter2", auth={"token": "abc", "user": "u"},
                         client_secret="x", cluster="c1")
    get_logger("t").debug("hidden_at_info")
    (line,) = stream.getvalue().splitlines()
    event = json.loads(line)
    assert event["event"] == "connecting" and event["level"] == "info"
    assert event["sasl_password"] == REDACTED and event["client_secret"] == REDACTED
    assert event["auth"] == {"token": REDACTED, "user": "u"}
    assert event["cluster"] == "c1"
    assert "hunter2" not in stream.getvalue()


def test_stdlib_library_logs_use_the_same_renderer() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    logging.getLogger("kafka.conn").warning("broker %s down", 3)
    event = json.loads(stream.getvalue().splitlines()[-1])
    assert event["event"] == "broker 3 down" and event["level"] == "warning"


def test_auto_format_is_console_on_tty_json_otherwise() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert resolve_format("auto", Tty()) == "console"
    assert resolve_format("auto", io.StringIO()) == "json"
    stream = Tty()
    configure_logging("auto", "info", stream=stream)
    get_logger().info("hello", cluster="c1")
    assert "hello" in stream.getvalue() and not stream.getvalue().startswith("{")


def test_one_summary_event_per_poll() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    settings = ClusterSettings(name="c1", bootstrap_servers=("h:1",), poll_interval_seconds=3600)
    store = SnapshotStore([settings])
    job = ClusterJob(settings, poll=in_thread(lambda: observation("c1")),
                     analyze=lambda obs: snapshot("c1", brokers=[broker(1, open_=2), broker(2)]))
    PollScheduler([job], store).run_once(job)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    (summary,) = [e for e in events if e["event"] == "poll_completed"]
    assert summary["cluster"] == "c1" and summary["up"] is True
    assert summary["brokers"] == 2 and summary["partitions_with_open_transactions"] == 2
    for key in ("poll_seconds", "analyze_seconds", "duration_seconds", "late_transactions",
                "hanging_transactions", "request_errors", "unobserved_partitions"):
        assert key in summary, key


class _SlowStream(io.StringIO):
    """Writes in small pieces and yields between them, as a pipe under load does."""

    def write(self, s: str) -> int:
        for i in range(0, len(s), 16):
            super().write(s[i : i + 16])
            time.sleep(0)
        return len(s)


def test_lines_from_structlog_and_stdlib_threads_never_merge() -> None:
    """Our events and library records share one lock: every line stays one JSON object."""
    stream = _SlowStream()
    configure_logging("json", "debug", stream=stream)
    ours = get_logger("exporter.test")
    theirs = logging.getLogger("kafka.test")

    def emit_ours() -> None:
        for i in range(100):
            ours.info("ours", i=i)

    def emit_theirs() -> None:
        for i in range(100):
            theirs.warning("theirs %d", i)

    threads = [threading.Thread(target=f) for f in (emit_ours, emit_theirs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 200
    assert sorted(json.loads(line)["event"] for line in lines).count("ours") == 100


def test_structlog_loads_on_the_first_line_and_renders_it_as_configured() -> None:
    """A process that configures logging and logs nothing (a quiet `scan`) does not import
    structlog; the first line, ours or a library's, loads it and is rendered as configured."""
    code = (
        "import io, json, logging, sys\n"
        "from exporter.logs import configure_logging, get_logger\n"
        "stream = io.StringIO()\n"
        "configure_logging('json', 'info', stream=stream)\n"
        "log = get_logger('t')\n"
        "before = 'structlog' in sys.modules\n"
        "logging.getLogger('kafka.conn').warning('broker %s down', 3)\n"
        "log.info('connecting', sasl_password='hunter2')\n"
        "log.debug('hidden_at_info')\n"
        "print(json.dumps([before, 'structlog' in sys.modules, stream.getvalue()]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    before, after, output = json.loads(done.stdout)
    assert (before, after) == (False, True)
    library, ours = (json.loads(line) for line in output.splitlines())
    assert library["event"] == "broker 3 down" and library["level"] == "warning"
    assert library["logger"] == "kafka.conn"
    assert ours["event"] == "connecting" and ours["level"] == "info"
    assert ours["sasl_password"] == REDACTED and "timestamp" in ours
