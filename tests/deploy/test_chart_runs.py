"""The chart runs what it renders: probes that work with mutual TLS on the web
port, and config.history turned on (emptyDir or a PersistentVolumeClaim).

With config.web.client_ca_secret the exporter refuses every TLS connection without a client
certificate, and the kubelet's httpGet probes send none; the chart renders exec probes that run
`kafka-txn-exporter probe` with config.web.probe_client_cert_secret. These tests run the rendered
probe commands against an exporter started from the rendered configuration and web config.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from security.pki import issue
from test_chart import (
    CHART_DIR,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    by_kind,
    exporter_config_text,
    load_rendered_config,
    objects,
    one,
    render,
    validate_all,
)

from exporter.probe import run_probe

pytestmark = pytest.mark.slow  # renders the chart with Helm's Go engine

REPO = Path(__file__).resolve().parents[2]
WEB_DIR = "/var/run/secrets/kafka-txn-exporter/web"


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _mtls_values(port: int) -> dict[str, Any]:
    return {
        "config": {
            "clusters": [{"name": "dev", "bootstrap_servers": ["127.0.0.1:9"]}],
            "web": {
                "listen_address": "127.0.0.1",
                "port": port,
                "web_config_secret": {"name": "kte-web-config"},
                "tls_secret": {"name": "kte-web-tls"},
                "client_ca_secret": {"name": "kte-client-ca"},
                "probe_client_cert_secret": {"name": "kte-probe-client"},
            },
        },
    }


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    return container


def _run_exec_probe(command: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    """The rendered exec command, with the image's `kafka-txn-exporter` as this checkout's and
    the pod's absolute paths below `root` (the scratch pod filesystem)."""
    assert command[:2] == ["kafka-txn-exporter", "probe"], command
    args = [str(root / a.lstrip("/")) if a.startswith("/var/run/") else a for a in command[2:]]
    return subprocess.run(
        [sys.executable, "-m", "exporter", "probe", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )


def test_mutual_tls_probes_are_exec_probes_that_reach_healthz_and_readyz(
    chart: helm.Chart, tmp_path: Path
) -> None:
    from exporter.app import serve
    from exporter.expose.http import MetricsServer

    pki = tmp_path / "pki"
    pki.mkdir()
    server_ca = issue(pki, "server-ca", None, ca=True)
    issue(pki, "server", server_ca, dns=("kte",), ips=("127.0.0.1",))
    client_ca = issue(pki, "client-ca", None, ca=True)
    issue(pki, "probe", client_ca)
    secrets = {
        "kte-web-config": {"web-config.yml": yaml.safe_dump({"tls_server_config": {
            "cert_file": "tls.crt", "key_file": "tls.key", "client_ca_file": "client-ca.crt",
            "client_auth_type": "RequireAndVerifyClientCert"}})},
        "kte-web-tls": {"tls.crt": (pki / "server.crt").read_text(),
                        "tls.key": (pki / "server.key").read_text()},
        "kte-client-ca": {"ca.crt": (pki / "client-ca.crt").read_text()},
        "kte-probe-client": {"tls.crt": (pki / "probe.crt").read_text(),
                             "tls.key": (pki / "probe.key").read_text()},
    }
    port = _free_port()
    docs = objects(render(chart, _mtls_values(port)))
    validate_all(docs)
    container = _container(docs)
    probes = {name: container[name] for name in ("livenessProbe", "readinessProbe")}
    for probe in probes.values():
        assert "httpGet" not in probe
        assert probe["exec"]["command"][-4:-2] == ["--key", f"{WEB_DIR}/probe-client.key"]
    assert probes["livenessProbe"]["exec"]["command"][2] == f"https://127.0.0.1:{port}/healthz"
    assert probes["readinessProbe"]["exec"]["command"][2] == f"https://127.0.0.1:{port}/readyz"

    root = tmp_path / "pod"
    settings = load_rendered_config(docs, root, secrets)
    stop, ready = threading.Event(), threading.Event()
    started: list[MetricsServer] = []

    def on_started(server: MetricsServer) -> None:
        started.append(server)
        ready.set()

    # The cluster (127.0.0.1:9) never answers: live, never ready.
    local = dataclasses.replace(settings, clusters=tuple(
        dataclasses.replace(c, request_timeout_seconds=0.5) for c in settings.clusters))
    thread = threading.Thread(target=serve, args=(local,),
                              kwargs={"stop": stop, "on_started": on_started}, daemon=True)
    thread.start()
    try:
        assert ready.wait(20), "exporter did not start"
        assert started[0].port == port
        # What a kubelet httpGet probe would do: HTTPS without a client certificate. Refused.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with pytest.raises(OSError), \
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw) as tls:  # ssl.SSLError and ConnectionError are OSErrors
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if not tls.recv(1024):
                raise ConnectionError("closed without an answer")

        live = _run_exec_probe(probes["livenessProbe"]["exec"]["command"], root)
        assert live.returncode == 0, live.stderr
        assert f"https://127.0.0.1:{port}/healthz: 200" in live.stdout
        not_ready = _run_exec_probe(probes["readinessProbe"]["exec"]["command"], root)
        assert not_ready.returncode == 1
        assert "/readyz: 503" in not_ready.stderr
    finally:
        stop.set()
        thread.join(timeout=15)


def test_mutual_tls_without_a_probe_certificate_fails_the_render_naming_the_value(
    chart: helm.Chart,
) -> None:
    values = _mtls_values(9981)
    del values["config"]["web"]["probe_client_cert_secret"]
    with pytest.raises(helm.HelmRenderError, match=r"config\.web\.probe_client_cert_secret"):
        render(chart, values)


def test_without_mutual_tls_the_probes_stay_http_get(chart: helm.Chart) -> None:
    values = _mtls_values(9981)
    del values["config"]["web"]["client_ca_secret"]
    container = _container(objects(render(chart, values)))
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz", "port": "http", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz", "port": "http", "scheme": "HTTPS"}


def test_probe_command_answers_and_fails_plainly() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run_probe(["ftp://x/healthz"], stdout=out, stderr=err) == 2
    assert err.getvalue().startswith("kafka-txn-exporter probe: url: ")
    err = io.StringIO()
    assert run_probe(["https://127.0.0.1:1/healthz", "--cert", "c"], stderr=err) == 2
    assert "--cert and --key" in err.getvalue()
    err = io.StringIO()
    assert run_probe([f"http://127.0.0.1:{_free_port()}/healthz", "--timeout", "2"],
                     stdout=out, stderr=err) == 1
    assert "ConnectionRefusedError" in err.getvalue()


# --------------------------------------------------------------------------- history


@pytest.mark.parametrize("storage", [
    {"type": "emptyDir", "sizeLimit": "2Gi"},
    {"type": "persistentVolumeClaim", "size": "5Gi", "storageClassName": "fast"},
    {"type": "persistentVolumeClaim", "existingClaim": "kte-history"},
], ids=["emptyDir", "created-claim", "existing-claim"])
def test_history_can_be_turned_on_and_the_exporter_loads_it(
    chart: helm.Chart, tmp_path: Path, storage: dict[str, Any]
) -> None:
    values = {"config": {"history": {"enabled": True, "retention_days": 7, "storage": storage}}}
    docs = objects(render(chart, values))
    validate_all(docs)
    config = yaml.safe_load(exporter_config_text(docs))
    assert config["history"] == {
        "directory": "/var/lib/kafka-txn-exporter/history", "retention_days": 7}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "history")
    assert mount["mountPath"] == "/var/lib/kafka-txn-exporter/history"
    assert "readOnly" not in mount
    volume = next(v for v in pod["volumes"] if v["name"] == "history")
    claims = by_kind(docs, "PersistentVolumeClaim")
    if storage["type"] == "emptyDir":
        assert volume["emptyDir"] == {"sizeLimit": "2Gi"} and claims == []
    elif "existingClaim" in storage:
        assert volume["persistentVolumeClaim"] == {"claimName": "kte-history"} and claims == []
    else:
        (claim,) = claims
        assert volume["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
        assert claim["metadata"]["namespace"] == NAMESPACE
        assert claim["metadata"]["name"] == f"{RELEASE}-kafka-txn-exporter-history"
        assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                                 "resources": {"requests": {"storage": "5Gi"}}}
    # The exporter's own loader accepts the rendered section (the directory is the mount).
    settings = load_rendered_config(docs, tmp_path / "pod")
    assert settings.history.directory == "/var/lib/kafka-txn-exporter/history"
    assert settings.history.retention_days == 7


def test_history_is_off_by_default_and_the_schema_checks_it(chart: helm.Chart) -> None:
    docs = objects(render(chart))
    assert "history" not in yaml.safe_load(exporter_config_text(docs))
    assert by_kind(docs, "PersistentVolumeClaim") == []
    for bad in ({"enabled": "yes"}, {"retention_days": 0},
                {"storage": {"type": "hostPath"}}, {"directory": "/x"}):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(copy.deepcopy({"config": {"history": bad}}))


@pytest.mark.parametrize("values", [
    _mtls_values(9981),
    {"config": {"history": {"enabled": True, "storage": {"type": "persistentVolumeClaim"}}}},
], ids=["mutual-tls-exec-probes", "history-pvc"])
def test_the_new_value_sets_lint_strictly(values: dict[str, Any]) -> None:
    for kube_version in KUBE_VERSIONS:
        report = helm.lint(CHART_DIR, copy.deepcopy(values), strict=True, namespace=NAMESPACE,
                           kube_version="v" + kube_version)
        assert report["errors"] == []
        assert [m for m in report["messages"] if m["severity"] >= 2] == []
