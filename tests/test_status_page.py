"""The status page (exporter/expose/status.py), rendered by headless Chromium and checked
through the DOM Chromium built from it, plus a screenshot.

Chromium comes from Debian (`scripts/install-browser-deps`). It only ever loads a file:// URL
written here (no network: background networking, component updates and QUIC are off).
"""

from __future__ import annotations

import html
import io
import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from exporter_factories import (
    NOW_MS,
    blocking,
    broker,
    late,
    open_txn,
    orphaned,
    snapshot,
)
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction

from exporter.abort import EXIT_ABORTED, run_abort
from exporter.analyze import analyze
from exporter.expose.status import (
    CONTENT_SECURITY_POLICY,
    REFRESH_SECONDS,
    RUNBOOK_URL,
    abort_command_line,
    render_status_page,
    running_abort_command,
)
from exporter.model import Classification, PartitionVerification, RequestError, TopicPartition
from exporter.observe import ClusterObserver
from exporter.settings import ClusterSettings

XSS_ID = "<script>alert(1)</script>"
CONFIG_FILE = "/etc/kte/config with space.yaml"
SCREENSHOT_SIZE = (1280, 900)
PHONE_WIDTH = 412  # CSS px of a common phone (e.g. Pixel 7) in portrait


# --------------------------------------------------------------------------- the browser


def _chromium() -> str:
    path = shutil.which("chromium")
    assert path is not None, "chromium missing: run scripts/install-browser-deps"
    return path


def _chromium_args(profile: Path) -> list[str]:
    return [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}",
    ]


def dump_dom(page: bytes, tmp_path: Path) -> str:
    """Chromium's serialisation of the DOM it built from `page`."""
    html_file = tmp_path / "status.html"
    html_file.write_bytes(page)
    result = subprocess.run(
        [*_chromium_args(tmp_path / "profile-dom"), "--dump-dom", html_file.as_uri()],
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert "</html>" in result.stdout, result.stderr[-2000:]
    return result.stdout


def screenshot(page: bytes, tmp_path: Path) -> Path:
    html_file = tmp_path / "status-shot.html"
    html_file.write_bytes(page)
    png = tmp_path / "status.png"
    subprocess.run(
        [*_chromium_args(tmp_path / "profile-shot"), f"--screenshot={png}",
         f"--window-size={SCREENSHOT_SIZE[0]},{SCREENSHOT_SIZE[1]}", html_file.as_uri()],
        capture_output=True, text=True, timeout=30, check=True,
    )
    return png


# Headless Chromium will not make its window narrower than 500 px, so the page is laid out in
# an iframe of the wanted width inside a harness page (media queries follow the iframe's width).
def _harness(tmp_path: Path, inner: Path, width: int, height: int) -> Path:
    outer = tmp_path / f"harness-{inner.stem}.html"
    outer.write_text(
        '<!DOCTYPE html><html><body style="margin:0">'
        f'<iframe src="{inner.name}" width="{width}" height="{height}" style="border:0">'
        '</iframe><pre id="probe-result"></pre><script>addEventListener("message", e => '
        '{ document.getElementById("probe-result").textContent = e.data; });</script>'
        "</body></html>",
        encoding="utf-8",
    )
    return outer


# Test-only probe: after layout, list every element whose box ends right of the viewport.
# The page itself never runs script (its CSP forbids it); the probe runs in a copy of the page
# whose CSP meta tag is removed, with the page's own CSS and markup otherwise unchanged.
_OVERFLOW_PROBE = """<script>
addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.right > width + 0.5) {
      wide.push(el.tagName.toLowerCase() + "." + el.className + " right=" + Math.round(box.right));
    }
  }
  parent.postMessage(JSON.stringify({viewport: width,
    scrollWidth: document.documentElement.scrollWidth, wide: wide}), "*");
});
</script>"""


def layout_at_width(page: bytes, tmp_path: Path, width: int) -> dict[str, object]:
    """Lay the page out in Chromium at `width` CSS px; what overflows horizontally."""
    text = page.decode()
    csp = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
    assert csp in text
    inner = tmp_path / "status-probe.html"
    inner.write_text(
        text.replace(csp, "").replace("</body>", _OVERFLOW_PROBE + "</body>"), encoding="utf-8"
    )
    outer = _harness(tmp_path, inner, width, 900)
    result = subprocess.run(
        [*_chromium_args(tmp_path / "profile-probe"), "--virtual-time-budget=5000",
         "--hide-scrollbars",
         "--dump-dom", outer.as_uri()],
        capture_output=True, text=True, timeout=60, check=True,
    )
    (report,) = Dom(result.stdout).texts("pre")
    data: dict[str, object] = json.loads(report)
    return data


def screenshot_at_width(page: bytes, tmp_path: Path, width: int, height: int) -> Path:
    """The unmodified page (CSP and all) at `width` CSS px, as a PNG `width` px wide."""
    inner = tmp_path / "status-narrow.html"
    inner.write_bytes(page)
    outer = _harness(tmp_path, inner, width, height)
    png = tmp_path / f"status-{width}.png"
    subprocess.run(
        [*_chromium_args(tmp_path / "profile-narrow"), f"--screenshot={png}",
         f"--window-size={width},{height}", "--hide-scrollbars", outer.as_uri()],
        capture_output=True, text=True, timeout=30, check=True,
    )
    return png


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: int | None
    text: list[str] = field(default_factory=list)

    def has_class(self, cls: str) -> bool:
        return cls in self.attrs.get("class", "").split()


class Dom(HTMLParser):
    """Just enough of the DOM: every element with its attributes, parent and text content."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[int] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        parent = self._open[-1] if self._open else None
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, parent))
        if tag not in ("meta", "br", "link", "img", "input"):
            self._open.append(len(self.elements) - 1)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            index = self._open.pop()
            if self.elements[index].tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for index in self._open:
            self.elements[index].text.append(data)

    def tags(self, tag: str) -> list[dict[str, str]]:
        return [e.attrs for e in self.elements if e.tag == tag]

    def texts(self, tag: str, cls: str | None = None) -> list[str]:
        return [
            "".join(e.text)
            for e in self.elements
            if e.tag == tag and (cls is None or e.has_class(cls))
        ]

    def rows(self, attr: str) -> list[tuple[str, list[str]]]:
        """(`attr` value, cells' text whitespace-normalised) of each <tr> carrying `attr`."""
        result: list[tuple[str, list[str]]] = []
        for index, row in enumerate(self.elements):
            if row.tag == "tr" and attr in row.attrs:
                result.append((row.attrs[attr], [
                    " ".join("".join(c.text).split())
                    for c in self.elements
                    if c.parent == index and c.tag in ("td", "th")
                ]))
        return result


# --------------------------------------------------------------------------- fixtures


def _example_page() -> bytes:
    hanging = late(
        open_txn("payments", 3, producer_id=4007, producer_epoch=2, start_offset=1_204_332,
                 age_ms=7_500_000),
        Classification.HANGING, XSS_ID, blocked=[("billing<i>", 360.0), ("audit", 30.0)],
    )
    tracked = late(
        open_txn("orders", 0, producer_id=12, start_offset=88, age_ms=1_320_000,
                 coordinator_epoch=4),
        Classification.COORDINATOR_TRACKED, "orders-writer-7", blocked_unknown="unauthorized",
    )
    unknown = late(open_txn("audit", 1, producer_id=99, start_offset=5, age_ms=700_000),
                   Classification.UNKNOWN, "")
    early = orphaned(open_txn("payments", 4, producer_id=4100, start_offset=77, age_ms=95_000),
                     "payments-writer-2")
    prod = snapshot(
        "prod-eu",
        brokers=[broker(1, open_=3, late_=2, hanging=1, orphaned_=2),
                 broker(2, open_=1, late_=1, orphaned_=None), broker(3, up=False)],
        late_transactions=[hanging, tracked, unknown],
        orphaned_transactions=[orphaned(hanging.transaction, XSS_ID, late=True), early],
        lso_lag={TopicPartition("payments", 3): 51_200, TopicPartition("orders", 0): 17},
        durations={TopicPartition("payments", 3): 7500.0},
        unobserved=2,
        request_errors=[RequestError(3, "DescribeProducers", "BROKER_UNREACHABLE")],
    )
    return render_status_page(
        {"prod-eu": prod, "staging": snapshot("staging", brokers=[broker(1)]), "dr": None},
        errors={"dr": "cluster not reachable"},
        config_file=CONFIG_FILE,
        abort_command=("kafka-txn-exporter", "abort"),
        now_ms=NOW_MS + 4000,
    )


# --------------------------------------------------------------------------- tests


def test_page_escapes_html_and_quotes_commands_without_a_browser() -> None:
    page = _example_page().decode()
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert html.escape(shlex.quote(CONFIG_FILE)) in page
    assert page.count('class="cmd"') == 1  # only the hanging row gets a command
    assert "<code>billing&lt;i&gt;</code>" in page  # a group id is chosen by its consumer
    # Two "none": the unknown-classification late one and the orphaned one.
    assert [page.count(f'data-blocked-groups="{n}"') for n in ("2", "unknown", "0")] == [1, 1, 2]
    assert f'http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}"' in page


def test_orphaned_transactions_not_yet_late_have_their_own_table_and_broker_column() -> None:
    dom = Dom(_example_page().decode())
    assert dom.rows("data-classification") == [
        ("hanging", ["2h 05m", "hanging", "payments-3", "4007 / 2", "-1", XSS_ID, "1204332",
                     "51200", "billing<i> (≥ 6m 00s), audit (≥ 30s)"]),
        ("coordinator_tracked", ["22m 00s", "coordinator_tracked", "orders-0", "12 / 0", "4",
                                 "orders-writer-7", "88", "17", "unknown (unauthorized)"]),
        ("unknown", ["11m 40s", "unknown", "audit-1", "99 / 0", "-1", "none", "5", "?", "none"]),
        # The late orphaned one stays in the late table only, classified hanging.
        ("orphaned", ["1m 35s", "orphaned", "payments-4", "4100 / 0", "-1",
                      "payments-writer-2", "77", "?", "none"]),
    ]
    prod_brokers = dom.rows("data-broker")[:3]  # prod-eu is first
    assert [(b, cells[-1]) for b, cells in prod_brokers] == [("1", "2"), ("2", "?"), ("3", "?")]
    assert "Orphaned transactions, not yet late (1)" in dom.texts("h3")
    assert "No orphaned transactions." in dom.texts("p", "empty")  # staging
    assert "3 late, 1 hanging, 2 orphaned" in " ".join(dom.texts("p", "meta"))


def test_a_lingering_transaction_blocking_groups_has_its_own_table_with_its_application() -> None:
    """Not late, tracked by its coordinator, stopping a group: listed under its own heading
    with what to do (no abort); the application its id names is shown under the id."""
    lingering = blocking(
        open_txn("clicks", 1, producer_id=11, start_offset=70, age_ms=180_000),
        Classification.COORDINATOR_TRACKED, "clicks-sink-3-118",
        blocked=[("dashboard", 120.0)], application="clicks-sink",
    )
    quiet = blocking(open_txn("clicks", 2, producer_id=12, start_offset=5, age_ms=180_000),
                     Classification.COORDINATOR_TRACKED, "clicks-sink-4-118")  # stops nobody
    hanging = late(open_txn("payments", 3, producer_id=4007, start_offset=9, age_ms=7_500_000),
                   Classification.HANGING, "billing-7", blocked=[("billing", 60.0)],
                   application="billing")
    page = render_status_page(
        {"prod": snapshot("prod", brokers=[broker(1)], late_transactions=[hanging],
                          blocking_transactions=[lingering, quiet])},
        errors={}, config_file=None, abort_command=("kafka-txn-exporter", "abort"),
        now_ms=NOW_MS,
    ).decode()
    dom = Dom(page)
    assert "Transactions blocking consumer groups, not late (1)" in dom.texts("h3")
    assert dom.rows("data-classification") == [
        ("hanging", ["2h 05m", "hanging", "payments-3", "4007 / 0", "-1",
                     "billing-7application: billing", "9", "?", "billing (≥ 1m 00s)"]),
        ("coordinator_tracked", ["3m 00s", "coordinator_tracked", "clicks-1", "11 / 0", "-1",
                                 "clicks-sink-3-118application: clicks-sink", "70", "?",
                                 "dashboard (≥ 2m 00s)"]),
    ]
    assert "Lingering: its coordinator tracks it" in page
    assert page.count('data-application="clicks-sink"') == 1
    assert page.count('class="cmd"') == 1  # the hanging one's abort command only


@pytest.mark.system_tools  # chromium
def test_chromium_dom_shows_the_script_id_as_text_and_the_exact_abort_command(
    tmp_path: Path,
) -> None:
    dom = Dom(dump_dom(_example_page(), tmp_path))

    # The hostile transactional id is text inside the table, never an element.
    assert dom.tags("script") == []
    assert dom.texts("span", "tid") == [XSS_ID, "orders-writer-7", "payments-writer-2"]
    # One section per cluster, each with its state.
    sections = [a["data-cluster"] for a in dom.tags("section")]
    assert sections == ["dr", "prod-eu", "staging"]
    assert "cluster not reachable" in dom.texts("p", "error")
    # Brokers: the down broker's counts are unknown, not zero.
    assert dom.rows("data-broker") == [
        ("1", ["1", "up", "60000 ms", "3", "2", "1", "2"]),  # prod-eu
        ("2", ["2", "up", "60000 ms", "1", "1", "0", "?"]),
        ("3", ["3", "down", "60000 ms", "?", "?", "?", "?"]),
        ("1", ["1", "up", "60000 ms", "0", "0", "0", "0"]),  # staging
    ]
    # Late transactions in age order with their classification, then the orphaned one.
    assert [a["data-classification"] for a in dom.tags("tr") if "data-classification" in a] == [
        "hanging", "coordinator_tracked", "unknown", "orphaned",
    ]
    assert dom.rows("data-classification")[0] == ("hanging", [
        "2h 05m", "hanging", "payments-3", "4007 / 2", "-1", XSS_ID, "1204332", "51200",
        "billing<i> (≥ 6m 00s), audit (≥ 30s)",
    ])
    # Blocked consumer groups beside each transaction; unknown says why, never "none".
    assert [row[1][-1] for row in dom.rows("data-classification")] == [
        "billing<i> (≥ 6m 00s), audit (≥ 30s)", "unknown (unauthorized)", "none", "none",
    ]
    # The command to copy, shell-quoted, and exactly the one abort.py accepts.
    (command,) = dom.texts("code", "cmd")
    assert command == (
        "kafka-txn-exporter abort --config '/etc/kte/config with space.yaml' "
        "--cluster prod-eu --topic payments --partition 3 --start-offset 1204332"
    )
    assert shlex.split(command)[3] == CONFIG_FILE


@pytest.mark.system_tools  # chromium
def test_screenshot_renders_at_the_requested_size(tmp_path: Path) -> None:
    png = screenshot(_example_page(), tmp_path)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == SCREENSHOT_SIZE
    # A blank page compresses to a few kB; text, tables and badges do not.
    assert len(data) > 30_000


def test_no_late_transactions_and_no_clusters() -> None:
    page = render_status_page({"quiet": snapshot("quiet", brokers=[broker(1)])}).decode()
    assert "No late transactions." in page
    assert "class=\"cmd\"" not in page
    assert "No cluster configured." in render_status_page({}).decode()


def test_exposure_section_shows_each_flag_and_unknown_as_unknown() -> None:
    exposed = snapshot(
        "old",
        brokers=[broker(1, partition_verification=PartitionVerification.DISABLED),
                 broker(2, partition_verification=PartitionVerification.ENABLED),
                 broker(3, partition_verification=PartitionVerification.NOT_OFFERED),
                 broker(4, up=False)],
        late_transactions=[late(open_txn("changelog", 0), topic_compacted=True),
                           late(open_txn("events", 1, producer_id=5)),
                           late(open_txn("orders", 2, producer_id=6))],
        compacted_topics={"changelog": True, "orders": False},
        finalized_transaction_version=0,
    )
    unknown = snapshot("new", brokers=[broker(1)])
    dom = Dom(render_status_page({"old": exposed, "new": unknown}).decode())
    assert [a["data-transaction-version"] for a in dom.tags("p")
            if "data-transaction-version" in a] == ["", "0"]  # "new" first: sorted by name
    texts = " ".join(dom.texts("p", "meta"))
    assert "unknown (no broker reported finalized features)" in texts
    assert "0 (not finalized) below 2" in " ".join(texts.split())
    assert [(a["data-broker"], a["data-verification"]) for a in dom.tags("li")
            if "data-verification" in a] == [
        ("1", ""), ("1", "disabled"), ("2", "enabled"), ("3", "not_offered"), ("4", "")]
    assert [" ".join(t.split()) for t in dom.texts("li")
            if "not offered" in t] == ["broker 3: not offered (Kafka before 3.6): exposed"]
    assert [(a["data-topic"], a["data-compacted"]) for a in dom.tags("li")
            if "data-compacted" in a] == [
        ("changelog", "true"), ("events", ""), ("orders", "false")]


def test_abort_command_line_without_config_file() -> None:
    txn = late(open_txn("t-1", 0, start_offset=7))
    assert abort_command_line("c", txn, abort_command=("kafka-txn-exporter", "abort")) == (
        "kafka-txn-exporter abort --cluster c --topic t-1 --partition 0 --start-offset 7"
    )
    # By default the command names this installation's executable by its path.
    default = shlex.split(abort_command_line("c", txn))
    assert default[:len(running_abort_command())] == list(running_abort_command())
    assert Path(default[0]).is_absolute() and os.access(default[0], os.X_OK)


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    config = {"transaction.max.timeout.ms": "60000",
              "transaction.partition.verification.enable": "false"}
    with SimCluster(brokers=2, topics={"t": 2}, broker_config=config) as cluster:
        yield cluster


def test_the_command_copied_from_the_page_aborts_the_transaction(
    sim: SimCluster, tmp_path: Path
) -> None:
    """Poll the simulator, render, read the command out of Chromium's DOM, run it."""
    servers = sim.bootstrap_servers.split(",")
    config_file = tmp_path / "kte config.yaml"
    config_file.write_text(
        "clusters:\n  - name: sim\n    bootstrap_servers: [" + ", ".join(servers) + "]\n"
        "admin:\n  clusters:\n    - name: sim\n",
        encoding="utf-8",
    )
    settings = ClusterSettings(name="sim", bootstrap_servers=tuple(servers))
    _, _, start = hanging_transaction(sim.bootstrap_servers, "hang-x", "t", 1,
                                      now_ms=sim.clock.now_ms)
    sim.clock.advance(10 * 60_000)
    poller = ClusterObserver(settings, clock_ms=sim.clock.now_ms)
    try:
        snap = analyze(poller.poll(), settings)
    finally:
        poller.close()
    page = render_status_page({"sim": snap}, config_file=str(config_file),
                              now_ms=sim.clock.now_ms())

    (command,) = Dom(dump_dom(page, tmp_path)).texts("code", "cmd")
    argv = shlex.split(command)
    prefix = len(running_abort_command())
    assert argv[:prefix] == list(running_abort_command())
    out, err = io.StringIO(), io.StringIO()
    code = run_abort([*argv[prefix:], "--yes"], clock_ms=sim.clock.now_ms, stdout=out, stderr=err,
                     env={})

    assert code == EXIT_ABORTED, err.getvalue()
    assert f"--start-offset {start}" in command
    assert f"last stable offset {start} -> {start + 2}" in out.getvalue()


def test_page_refreshes_itself_without_script_and_links_the_runbook() -> None:
    page = _example_page().decode()
    dom = Dom(page)
    metas = {m.get("http-equiv", ""): m.get("content", "") for m in dom.tags("meta")}
    assert metas["refresh"] == str(REFRESH_SECONDS)
    assert metas["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "script-src" not in CONTENT_SECURITY_POLICY and "default-src 'none'" in (
        CONTENT_SECURITY_POLICY)
    assert dom.tags("script") == []
    links = [a["href"] for a in dom.tags("a")]
    assert RUNBOOK_URL in links
    assert f"{RUNBOOK_URL}#kafkahangingtransaction" in links
    assert f"{RUNBOOK_URL}#check-before-aborting" in links
    no_refresh = render_status_page({}, refresh_seconds=0).decode()
    assert 'http-equiv="refresh"' not in no_refresh


@pytest.mark.system_tools  # chromium
def test_page_is_usable_at_phone_width(tmp_path: Path) -> None:
    """At 412 px nothing sticks out sideways: tables become one card per row, the abort
    command wraps. A screenshot is kept next to the test's files for a look."""
    layout = layout_at_width(_example_page(), tmp_path, PHONE_WIDTH)
    assert layout["viewport"] == PHONE_WIDTH
    assert layout["wide"] == [] and layout["scrollWidth"] == PHONE_WIDTH, layout
    # The same check catches the old layout: a desktop-only table does overflow.
    wide_table = _example_page().replace(b"transactions cards", b"transactions")
    assert layout_at_width(wide_table, tmp_path, PHONE_WIDTH)["wide"] != []
    png = screenshot_at_width(_example_page(), tmp_path, PHONE_WIDTH, 1800)
    data = png.read_bytes()
    assert struct.unpack(">II", data[16:24]) == (PHONE_WIDTH, 1800)
    assert len(data) > 30_000


def _start_daemon(config: Path) -> tuple[subprocess.Popen[bytes], int]:
    log_path = config.with_suffix(".log")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--config", config.name],
            cwd=config.parent, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if not k.startswith("KTE_")},
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"exporter_started"' in line:
                listen = json.loads(line)["listen"]
                return proc, int(listen.rsplit(":", 1)[1].split("/", 1)[0])
        assert proc.poll() is None, log_path.read_text(encoding="utf-8", errors="replace")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the exporter did not start")


def test_the_daemons_page_command_carries_its_config_and_aborts_as_shown(
    sim: SimCluster, tmp_path: Path
) -> None:
    """`serve --config <relative path>`: the page's command names the absolute config path,
    and run as shown (plus --yes) it aborts the hanging transaction."""
    servers = sim.bootstrap_servers.split(",")
    config = tmp_path / "kte.yaml"
    config.write_text(
        "clusters:\n  - name: sim\n    bootstrap_servers: [" + ", ".join(servers) + "]\n"
        "    poll_interval_seconds: 1\n"
        "web:\n  listen_address: 127.0.0.1\n  port: 0\n"
        "log:\n  format: json\n"
        "admin:\n  clusters:\n    - name: sim\n",
        encoding="utf-8",
    )
    # Written 15 minutes ago: late at once (60 s max timeout + the 5 min default buffer).
    _, _, start = hanging_transaction(sim.bootstrap_servers, "hang-d", "t", 0,
                                      backdate_ms=15 * 60_000)
    proc, port = _start_daemon(config)
    try:
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                page = response.read()
            commands = Dom(page.decode()).texts("code", "cmd")
            if commands or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        (command,) = commands
        argv = shlex.split(command)
        assert argv[argv.index("--config") + 1] == str(config.resolve())
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir("/")  # run from elsewhere: the path must not depend on the daemon's cwd
            code = run_abort([*argv[2:], "--yes"], stdout=out, stderr=err, env={})
        assert code == EXIT_ABORTED, err.getvalue()
        assert f"--start-offset {start}" in command
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
