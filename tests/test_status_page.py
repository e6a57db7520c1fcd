"""The status page (exporter/expose/status.py), rendered by headless Chromium and checked
through the DOM Chromium built from it, plus a screenshot.

Chromium comes from Debian (`scripts/install-browser-deps`). It only ever loads a file:// URL
written here (no network: background networking, component updates and QUIC are off).
"""

from __future__ import annotations

import html
import io
import shlex
import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from exporter_factories import NOW_MS, broker, late, open_txn, snapshot
from kafka_sim.cluster import SimCluster
from kafka_sim.producer import hanging_transaction

from exporter.abort import EXIT_ABORTED, run_abort
from exporter.analyze import analyze
from exporter.collect.poll import ClusterPoller
from exporter.expose.status import (
    CONTENT_SECURITY_POLICY,
    abort_command_line,
    render_status_page,
)
from exporter.model import Classification, RequestError, TopicPartition
from exporter.settings import ClusterSettings

XSS_ID = "<script>alert(1)</script>"
CONFIG_FILE = "/etc/kte/config with space.yaml"
SCREENSHOT_SIZE = (1280, 900)


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
        Classification.HANGING, XSS_ID,
    )
    tracked = late(
        open_txn("orders", 0, producer_id=12, start_offset=88, age_ms=1_320_000,
                 coordinator_epoch=4),
        Classification.COORDINATOR_TRACKED, "orders-writer-7",
    )
    unknown = late(open_txn("audit", 1, producer_id=99, start_offset=5, age_ms=700_000),
                   Classification.UNKNOWN, "")
    prod = snapshot(
        "prod-eu",
        brokers=[broker(1, open_=2, late_=2, hanging=1), broker(2, open_=1, late_=1),
                 broker(3, up=False)],
        late_transactions=[hanging, tracked, unknown],
        lso_lag={TopicPartition("payments", 3): 51_200, TopicPartition("orders", 0): 17},
        durations={TopicPartition("payments", 3): 7500.0},
        unobserved=2,
        request_errors=[RequestError(3, "DescribeProducers", "BROKER_UNREACHABLE")],
    )
    return render_status_page(
        {"prod-eu": prod, "staging": snapshot("staging", brokers=[broker(1)]), "dr": None},
        errors={"dr": "cluster not reachable"},
        config_file=CONFIG_FILE,
        now_ms=NOW_MS + 4000,
    )


# --------------------------------------------------------------------------- tests


def test_page_escapes_html_and_quotes_commands_without_a_browser() -> None:
    page = _example_page().decode()
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert html.escape(shlex.quote(CONFIG_FILE)) in page
    assert page.count('class="cmd"') == 1  # only the hanging row gets a command
    assert f'http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}"' in page


@pytest.mark.system_tools  # chromium
def test_chromium_dom_shows_the_script_id_as_text_and_the_exact_abort_command(
    tmp_path: Path,
) -> None:
    dom = Dom(dump_dom(_example_page(), tmp_path))

    # The hostile transactional id is text inside the table, never an element.
    assert dom.tags("script") == []
    assert dom.texts("span", "tid") == [XSS_ID, "orders-writer-7"]
    # One section per cluster, each with its state.
    sections = [a["data-cluster"] for a in dom.tags("section")]
    assert sections == ["dr", "prod-eu", "staging"]
    assert "cluster not reachable" in dom.texts("p", "error")
    # Brokers: the down broker's counts are unknown, not zero.
    assert dom.rows("data-broker") == [
        ("1", ["1", "up", "60000 ms", "2", "2", "1"]),  # prod-eu
        ("2", ["2", "up", "60000 ms", "1", "1", "0"]),
        ("3", ["3", "down", "60000 ms", "?", "?", "?"]),
        ("1", ["1", "up", "60000 ms", "0", "0", "0"]),  # staging
    ]
    # Late transactions in age order with their classification.
    assert [a["data-classification"] for a in dom.tags("tr") if "data-classification" in a] == [
        "hanging", "coordinator_tracked", "unknown",
    ]
    assert dom.rows("data-classification")[0] == ("hanging", [
        "2h 05m", "hanging", "payments-3", "4007 / 2", "-1", XSS_ID, "1204332", "51200",
    ])
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


def test_abort_command_line_without_config_file() -> None:
    txn = late(open_txn("t-1", 0, start_offset=7))
    assert abort_command_line("c", txn) == (
        "kafka-txn-exporter abort --cluster c --topic t-1 --partition 0 --start-offset 7"
    )


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
    poller = ClusterPoller(settings, clock_ms=sim.clock.now_ms)
    try:
        snap = analyze(poller.poll(), settings)
    finally:
        poller.close()
    page = render_status_page({"sim": snap}, config_file=str(config_file),
                              now_ms=sim.clock.now_ms())

    (command,) = Dom(dump_dom(page, tmp_path)).texts("code", "cmd")
    argv = shlex.split(command)
    assert argv[:2] == ["kafka-txn-exporter", "abort"]
    out, err = io.StringIO(), io.StringIO()
    code = run_abort([*argv[2:], "--yes"], clock_ms=sim.clock.now_ms, stdout=out, stderr=err,
                     env={})

    assert code == EXIT_ABORTED, err.getvalue()
    assert f"--start-offset {start}" in command
    assert f"last stable offset {start} -> {start + 2}" in out.getvalue()
