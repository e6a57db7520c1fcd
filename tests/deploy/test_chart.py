"""The Helm chart (deploy/helm/kafka-txn-exporter), rendered by Helm's own Go engine.

`helm-python-sdk` embeds Helm 4's Go SDK (render, lint, values-schema validation; no helm
binary, no cluster). Every rendered object is validated against the Kubernetes OpenAPI schemas
that `kubernetes-validate` ships offline, in strict mode (unknown fields are errors), for the
oldest Kubernetes the chart claims (Chart.yaml kubeVersion) and the newest the package ships.
ServiceMonitor and PrometheusRule are CRDs that kubernetes-validate has no schema for: they
are checked against the subset of the Prometheus Operator's monitoring.coreos.com/v1 schema
the chart uses (CRD_SCHEMAS below), with unknown fields rejected as well.

The exporter config the chart renders is fed to the exporter's own loader
(exporter.config.load_settings) on a scratch filesystem laid out exactly like the pod's
volume mounts, so a path in the config that no mount provides fails the test.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from exporter.config import RESERVED_LABELS, ConfigError, load_settings

pytestmark = pytest.mark.slow  # renders the chart with Helm's Go engine many times

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "deploy" / "helm" / "kafka-txn-exporter"
RELEASE = "kte"
NAMESPACE = "monitoring"

# Oldest: Chart.yaml's kubeVersion floor. Newest: the latest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version() + ".0")

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

SECRET_SENTINEL = "s3cr3t-sentinel-NEVER-RENDERED"  # a test value, not a secret

# Prometheus duration, as the operator's CRD pattern spells it.
_DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_STR_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "namespace"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": _DNS_SUBDOMAIN},
        "namespace": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
        "labels": {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": 63},
        },
        "annotations": _STR_MAP,
    },
}
_RELABEL: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {"type": "string"},
    },
}
_SECRET_KEY: dict[str, Any] = {
    "type": "object",
    "required": ["key"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "key": {"type": "string"},
                   "optional": {"type": "boolean"}},
}
_SECRET_OR_CONFIGMAP: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"secret": _SECRET_KEY, "configMap": _SECRET_KEY},
}
_SAFE_TLS_CONFIG: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "ca": _SECRET_OR_CONFIGMAP,
        "cert": _SECRET_OR_CONFIGMAP,
        "keySecret": _SECRET_KEY,
        "serverName": {"type": "string"},
        "insecureSkipVerify": {"type": "boolean"},
        # TLSConfig (ServiceMonitor endpoints) also takes files in the Prometheus pod.
        "caFile": {"type": "string"},
        "certFile": {"type": "string"},
        "keyFile": {"type": "string"},
    },
}
# The subset of monitoring.coreos.com/v1 (prometheus-operator CRDs) that the chart renders;
# field names and types as in the operator's CRD OpenAPI schema.
_SERVICE_MONITOR_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["selector", "endpoints"],
    "additionalProperties": False,
    "properties": {
        "jobLabel": {"type": "string"},
        "namespaceSelector": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "any": {"type": "boolean"},
                "matchNames": {"type": "array", "items": {"type": "string"}},
            },
        },
        "selector": {
            "type": "object",
            "additionalProperties": False,
            "required": ["matchLabels"],
            "properties": {"matchLabels": _STR_MAP},
        },
        "endpoints": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["port"],
                "properties": {
                    "port": {"type": "string"},
                    "path": {"type": "string"},
                    "scheme": {"enum": ["http", "https"]},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                    "honorLabels": {"type": "boolean"},
                    "tlsConfig": _SAFE_TLS_CONFIG,
                    "basicAuth": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"username": _SECRET_KEY, "password": _SECRET_KEY},
                    },
                    "relabelings": {"type": "array", "items": _RELABEL},
                    "metricRelabelings": {"type": "array", "items": _RELABEL},
                },
            },
        },
    },
}
_PROMETHEUS_RULE_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["groups"],
    "additionalProperties": False,
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "rules"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "rules": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["expr"],
                            "oneOf": [
                                {"required": ["alert"]},
                                {"required": ["record"]},
                            ],
                            "additionalProperties": False,
                            "properties": {
                                "alert": {"type": "string"},
                                "record": {"type": "string"},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": _DURATION},
                                "keep_firing_for": {
                                    "type": "string",
                                    "pattern": _DURATION,
                                },
                                "labels": _STR_MAP,
                                "annotations": _STR_MAP,
                            },
                        },
                    },
                },
            },
        }
    },
}


def _monitoring_v1(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A monitoring.coreos.com/v1 object of `kind` with its spec schema."""
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": _monitoring_v1("ServiceMonitor", _SERVICE_MONITOR_SPEC),
    "PrometheusRule": _monitoring_v1("PrometheusRule", _PROMETHEUS_RULE_SPEC),
}

# Values that switch on every optional piece, with three clusters (TLS+SASL, SASL only, plain).
ALL_ON: dict[str, Any] = {
    "replicaCount": 2,
    "config": {
        "clusters": [
            {
                "name": "prod-eu:1",
                "bootstrap_servers": ["kafka-0.prod:9093", "kafka-1.prod:9093"],
                "client_id": "kte-prod",
                "poll_interval_seconds": "15s",
                "late_buffer_seconds": 300,
                "transaction_max_timeout_ms": 900000,
                "labels": {"env": "prod", "dc": "eu1"},
                "tls": {
                    "enabled": True,
                    "check_hostname": True,
                    "ca_secret": {"name": "prod-cluster-ca", "key": "ca.crt"},
                    "client_cert_secret": {"name": "kte-prod-user"},
                },
                "sasl": {
                    "mechanism": "SCRAM-SHA-512",
                    "username": "kte-prod",
                    "password_secret": {"name": "kte-prod-sasl", "key": "password"},
                },
            },
            {
                "name": "staging",
                "bootstrap_servers": ["kafka.staging:9092"],
                "poll_interval_seconds": 60,
                "sasl": {
                    "mechanism": "PLAIN",
                    "username": "kte-staging",
                    "password_secret": {"name": "kte-staging-sasl", "key": "pw"},
                },
            },
            {"name": "dev", "bootstrap_servers": ["kafka.dev:9092"]},
        ],
        "log": {"format": "json", "level": "debug"},
    },
    "serviceMonitor": {
        "enabled": True,
        "labels": {"release": "prometheus"},
        "relabelings": [{"targetLabel": "team", "replacement": "streaming"}],
    },
    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
    "grafanaDashboards": {"enabled": True, "annotations": {"grafana_folder": "Kafka"}},
    "networkPolicy": {
        "enabled": True,
        "ingressFrom": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                }
            }
        ],
        "egress": {
            "enabled": True,
            "kafkaTo": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kafka"}}}
            ],
        },
    },
    "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
}

# What the referenced Secrets hold in the scratch filesystem (name -> key -> content).
FAKE_SECRETS: dict[str, dict[str, str]] = {
    "prod-cluster-ca": {"ca.crt": "-----BEGIN CERTIFICATE-----\nprod-ca\n"},
    "kte-prod-user": {"tls.crt": "client-cert\n", "tls.key": "client-key\n"},
    "kte-prod-sasl": {"password": SECRET_SENTINEL + "\n"},
    "kte-staging-sasl": {"pw": "staging-" + SECRET_SENTINEL},
}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> rendered text, like `helm template` (schema validated first)."""
    return chart.render(copy.deepcopy(values or {}), name=RELEASE, namespace=NAMESPACE)


def objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def validate_all(docs: list[dict[str, Any]]) -> None:
    """Strict Kubernetes schema validation; CRD kinds against CRD_SCHEMAS instead."""
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            # Not in kubernetes-validate's core schemas: our own structural schema.
            jsonschema.Draft202012Validator(CRD_SCHEMAS[doc["kind"]]).validate(doc)
            continue
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def exporter_config_text(docs: list[dict[str, Any]]) -> str:
    configmap = next(
        d for d in by_kind(docs, "ConfigMap") if "exporter.yaml" in d.get("data", {})
    )
    text: str = configmap["data"]["exporter.yaml"]
    return text


def materialize_pod(
    docs: list[dict[str, Any]], root: Path, secrets: dict[str, dict[str, str]] | None = None
) -> Path:
    """Lay the exporter container's volume mounts out under `root`; return its config path.

    ConfigMap volumes get the ConfigMap's data, projected/secret volumes the FAKE_SECRETS
    items they select, so only files the pod would really see exist.
    """
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in by_kind(docs, "ConfigMap")}
    container = pod["containers"][0]
    for mount in container["volumeMounts"]:
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            for key, content in configmaps[volume["configMap"]["name"]].items():
                (target / key).write_text(content, encoding="utf-8")
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                secret = source["secret"]
                for item in secret["items"]:
                    data = (secrets or FAKE_SECRETS)[secret["name"]][item["key"]]
                    (target / item["path"]).write_text(data, encoding="utf-8")
        else:  # an empty directory either way (/tmp, the history)
            assert "emptyDir" in volume or "persistentVolumeClaim" in volume, volume
    args: list[str] = container["args"]
    assert args[:2] == ["serve", "--config"]
    return root / args[2].lstrip("/")


def load_rendered_config(
    docs: list[dict[str, Any]], root: Path, secrets: dict[str, dict[str, str]] | None = None
) -> Any:
    """Run the exporter's own loader on the rendered config inside the scratch pod filesystem."""
    config_path = materialize_pod(docs, root, secrets)
    data = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    # Absolute paths in the config refer to the pod's filesystem, i.e. below `root` here.
    for cluster in data["clusters"]:
        for section in ("tls", "sasl"):
            for key, value in (cluster.get(section) or {}).items():
                if key.endswith("_file"):
                    assert value.startswith("/"), value
                    cluster[section][key] = str(root / value.lstrip("/"))
    web_config_file = (data.get("web") or {}).get("web_config_file")
    if web_config_file:
        assert web_config_file.startswith("/"), web_config_file
        data["web"]["web_config_file"] = str(root / web_config_file.lstrip("/"))
    rebased = config_path.with_name("rebased.yaml")
    rebased.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_settings(str(rebased), env={})


def flatten_keys(values: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every key in a values mapping (lists are leaves)."""
    keys: list[str] = []
    if isinstance(values, dict):
        for key, value in values.items():
            path = f"{prefix}.{key}" if prefix else key
            keys.append(path)
            keys.extend(flatten_keys(value, path))
    return keys


# --------------------------------------------------------------------------- lint and schema


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-on"])
def test_helm_lint_strict_finds_nothing(values: dict[str, Any], kube_version: str) -> None:
    report = helm.lint(
        CHART_DIR, copy.deepcopy(values), strict=True, namespace=NAMESPACE,
        kube_version="v" + kube_version,
    )
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended": the project has no icon yet).
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_values_schema_is_a_valid_draft7_schema_and_accepts_the_defaults() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(defaults)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": "two"}, "/replicaCount"),
        ({"config": {"web": {"listen_address": "0.0.0.0", "port": "9981"}}}, "/config/web/port"),
        ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled"),
        ({"serviceMonitor": {"enable": True}}, "enable"),  # a typo is not silently ignored
        (
            {"config": {"clusters": [{"name": "a", "bootstrap_servers": "a:9092"}]}},
            "/config/clusters/0/bootstrap_servers",
        ),
        (
            {"config": {"clusters": [{"name": "a", "bootstrap_servers": ["a:9092"],
                                      "poll_interval_seconds": "soon"}]}},
            "/config/clusters/0/poll_interval_seconds",
        ),
        ({"config": {"clusters": []}}, "/config/clusters"),
        ({"podDisruptionBudget": {"maxUnavailable": "half"}}, "/podDisruptionBudget"),
    ],
    ids=["replicas-string", "port-string", "bool-string", "typo", "servers-not-list",
         "bad-duration", "no-cluster", "pdb-not-int-or-percent"],
)
def test_values_with_wrong_type_are_rejected_by_the_schema(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmValuesError):
        render(chart, values)


def test_a_values_file_with_a_wrong_type_fails_helm_lint(tmp_path: Path) -> None:
    values_file = tmp_path / "bad-values.yaml"
    values_file.write_text("replicaCount: two\nservice:\n  port: http\n", encoding="utf-8")
    values = helm.values_from_yaml(values_file.read_text(encoding="utf-8"))
    report = helm.lint(CHART_DIR, values, strict=True)
    joined = "\n".join(report["errors"])
    assert "/replicaCount" in joined
    assert "/service/port" in joined


def test_an_inline_sasl_password_is_rejected(chart: helm.Chart) -> None:
    values = {"config": {"clusters": [{
        "name": "a", "bootstrap_servers": ["a:9092"],
        "sasl": {"mechanism": "PLAIN", "username": "u", "password": SECRET_SENTINEL,
                 "password_secret": {"name": "s"}},
    }]}}
    with pytest.raises(helm.HelmValuesError, match="password"):
        render(chart, values)


# --------------------------------------------------------------------------- rendering


def test_defaults_render_valid_kubernetes_objects(chart: helm.Chart) -> None:
    docs = objects(render(chart))
    validate_all(docs)
    assert sorted(d["kind"] for d in docs) == [
        "ConfigMap", "Deployment", "Service", "ServiceAccount"
    ]
    assert all(d["metadata"]["namespace"] == NAMESPACE for d in docs)


def test_everything_on_renders_valid_objects_including_crds(chart: helm.Chart) -> None:
    docs = objects(render(chart, ALL_ON))
    validate_all(docs)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted([
        "ConfigMap", "ConfigMap", "ConfigMap",  # exporter config + 2 dashboards
        "Deployment", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Service",
        "ServiceAccount", "ServiceMonitor",
    ])


@pytest.mark.parametrize(
    ("key", "kind", "count"),
    [
        ("serviceMonitor", "ServiceMonitor", 1),
        ("prometheusRule", "PrometheusRule", 1),
        ("networkPolicy", "NetworkPolicy", 1),
        ("podDisruptionBudget", "PodDisruptionBudget", 1),
        ("grafanaDashboards", "ConfigMap", 1 + len(list((CHART_DIR / "files").glob("*.json")))),
    ],
)
def test_each_optional_piece_is_rendered_only_when_enabled(
    chart: helm.Chart, key: str, kind: str, count: int
) -> None:
    off = objects(render(chart, {key: {"enabled": False}}))
    on = objects(render(chart, {key: {"enabled": True}}))
    validate_all(on)
    base = 1 if kind == "ConfigMap" else 0
    assert len(by_kind(off, kind)) == base
    assert len(by_kind(on, kind)) == count


def test_service_account_can_be_left_to_the_user(chart: helm.Chart) -> None:
    docs = objects(render(chart, {"serviceAccount": {"create": False, "name": "existing"}}))
    validate_all(docs)
    assert by_kind(docs, "ServiceAccount") == []
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"


def test_deployment_is_hardened_and_probed(chart: helm.Chart) -> None:
    docs = objects(render(chart))
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz", "port": "http", "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz", "port": "http", "scheme": "HTTP"}
    assert container["ports"] == [{"name": "http", "containerPort": 9981, "protocol": "TCP"}]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    tmp_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
    tmp_volume = next(v for v in pod["volumes"] if v["name"] == tmp_mount["name"])
    assert "emptyDir" in tmp_volume
    assert container["image"] == "ghcr.io/kafka-txn-exporter/kafka-txn-exporter:0.1.0"


def test_pod_user_matches_the_images_non_root_user(chart: helm.Chart) -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    users = re.findall(r"^USER\s+(\d+):(\d+)\s*$", dockerfile, flags=re.MULTILINE)
    assert users, "the image must switch to a numeric non-root USER uid:gid"
    uid, gid = (int(x) for x in users[-1])
    pod = one(objects(render(chart)), "Deployment")["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    assert uid != 0


def test_config_checksum_annotation_follows_the_rendered_config(chart: helm.Chart) -> None:
    def checksum_and_configmap(values: dict[str, Any]) -> tuple[str, str]:
        rendered = render(chart, values)
        docs = objects(rendered)
        annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return annotations["checksum/config"], rendered[
            "kafka-txn-exporter/templates/configmap.yaml"
        ]

    checksum, configmap_text = checksum_and_configmap({})
    assert checksum == hashlib.sha256(configmap_text.encode()).hexdigest()
    changed, _ = checksum_and_configmap({"config": {"log": {"format": "json", "level": "debug"}}})
    assert changed != checksum
    unchanged, _ = checksum_and_configmap({"replicaCount": 3})
    assert unchanged == checksum


def test_image_digest_pins_the_image(chart: helm.Chart) -> None:
    digest = "sha256:" + "ab" * 32
    docs = objects(render(chart, {"image": {"tag": "9.9.9", "digest": digest}}))
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/kafka-txn-exporter/kafka-txn-exporter@{digest}"


def test_web_port_drives_container_port_and_config(chart: helm.Chart, tmp_path: Path) -> None:
    docs = objects(render(chart, {"config": {"web": {"listen_address": "::", "port": 9555}}}))
    validate_all(docs)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 9555
    settings = load_rendered_config(docs, tmp_path)
    assert (settings.web.listen_address, settings.web.port) == ("::", 9555)


# --------------------------------------------------------------------------- exporter config


def test_default_config_is_accepted_by_the_exporters_loader(
    chart: helm.Chart, tmp_path: Path
) -> None:
    settings = load_rendered_config(objects(render(chart)), tmp_path)
    (cluster,) = settings.clusters
    assert cluster.name == "kafka"
    assert cluster.bootstrap_servers == ("kafka-bootstrap.kafka.svc:9092",)
    assert cluster.tls is None and cluster.sasl is None
    assert (settings.web.port, settings.log_format, settings.log_level) == (9981, "json", "info")


def test_several_clusters_with_tls_and_sasl_load_with_secrets_from_their_mounts(
    chart: helm.Chart, tmp_path: Path
) -> None:
    docs = objects(render(chart, ALL_ON))
    settings = load_rendered_config(docs, tmp_path)
    prod, staging, dev = settings.clusters
    assert [c.name for c in settings.clusters] == ["prod-eu:1", "staging", "dev"]
    assert prod.bootstrap_servers == ("kafka-0.prod:9093", "kafka-1.prod:9093")
    assert prod.client_id == "kte-prod"
    assert prod.poll_interval_seconds == 15.0
    assert prod.transaction_max_timeout_ms == 900000
    assert dict(prod.labels) == {"env": "prod", "dc": "eu1"}
    # The password reached the exporter through the mounted Secret file, not the ConfigMap.
    assert prod.sasl is not None and prod.sasl.password == SECRET_SENTINEL
    assert (prod.sasl.mechanism, prod.sasl.username) == ("SCRAM-SHA-512", "kte-prod")
    assert prod.tls is not None and prod.tls.ca_file and prod.tls.cert_file and prod.tls.key_file
    assert Path(prod.tls.ca_file).read_text() == FAKE_SECRETS["prod-cluster-ca"]["ca.crt"]
    assert Path(prod.tls.key_file).read_text() == FAKE_SECRETS["kte-prod-user"]["tls.key"]
    assert staging.sasl is not None and staging.sasl.password == "staging-" + SECRET_SENTINEL
    assert staging.tls is None and staging.poll_interval_seconds == 60.0
    assert dev.sasl is None and dev.tls is None
    assert settings.log_level == "debug"


def test_secrets_are_only_referenced_never_rendered(chart: helm.Chart) -> None:
    rendered = render(chart, ALL_ON)
    text = "\n".join(rendered.values())
    assert SECRET_SENTINEL not in text
    docs = objects(rendered)
    assert by_kind(docs, "Secret") == []
    config = yaml.safe_load(exporter_config_text(docs))
    prod_sasl = config["clusters"][0]["sasl"]
    assert "password" not in prod_sasl and "password_env" not in prod_sasl
    assert prod_sasl["password_file"].startswith("/var/run/secrets/kafka-txn-exporter/0/")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    referenced = {
        (source["secret"]["name"], item["key"])
        for volume in pod["volumes"]
        for source in volume.get("projected", {}).get("sources", [])
        for item in source["secret"]["items"]
    }
    assert referenced == {
        ("prod-cluster-ca", "ca.crt"),
        ("kte-prod-user", "tls.crt"),
        ("kte-prod-user", "tls.key"),
        ("kte-prod-sasl", "password"),
        ("kte-staging-sasl", "pw"),
    }
    # One credentials volume per cluster that has credentials, each mounted read-only.
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["cluster-0-credentials"]["readOnly"] is True
    assert mounts["cluster-1-credentials"]["mountPath"].endswith("/1")
    assert "cluster-2-credentials" not in mounts


def test_tls_without_secrets_uses_the_system_trust_store(
    chart: helm.Chart, tmp_path: Path
) -> None:
    values = {"config": {"clusters": [{
        "name": "cloud", "bootstrap_servers": ["broker.example.com:9094"],
        "tls": {"enabled": True},
    }]}}
    docs = objects(render(chart, values))
    validate_all(docs)
    settings = load_rendered_config(docs, tmp_path)
    assert settings.clusters[0].tls is not None
    assert settings.clusters[0].tls.ca_file is None and settings.clusters[0].tls.check_hostname


def test_rendered_config_with_an_unknown_key_would_fail_the_loader(tmp_path: Path) -> None:
    """The loader really validates: the acceptance tests above are not vacuous."""
    bad = tmp_path / "exporter.yaml"
    bad.write_text("clusters:\n- name: a\n  bootstrap_servers: [a:9092]\n  pol: 1\n")
    with pytest.raises(ConfigError, match="pol"):
        load_settings(str(bad), env={})


# --------------------------------------------------------------------------- rules, dashboards


def test_chart_files_are_the_generators_output() -> None:
    """files/ holds what `python -m dashboards.generate` writes there: the dashboards (also in
    dashboards/) and the rules template the plain rules.yaml is filled from."""
    from dashboards.generate import render_chart_files

    for relative, content in render_chart_files().items():
        assert (CHART_DIR / "files" / relative).read_text(encoding="utf-8") == content, relative
    for board in (REPO / "dashboards").glob("*.json"):
        assert (CHART_DIR / "files" / board.name).read_bytes() == board.read_bytes()


def _rules(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    spec = one(docs, "PrometheusRule")["spec"]
    return {rule["alert"]: rule for group in spec["groups"] for rule in group["rules"]
            if "alert" in rule}


def _records(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    spec = one(docs, "PrometheusRule")["spec"]
    return {rule["record"]: rule for group in spec["groups"] for rule in group["rules"]
            if "record" in rule}


def test_prometheus_rule_with_default_values_is_the_plain_rules_file(chart: helm.Chart) -> None:
    """One generator: the chart's defaults give exactly dashboards/alerts/rules.yaml."""
    docs = objects(render(chart, {"prometheusRule": {
        "enabled": True, "exporterSelector": 'job="kafka-txn-exporter"'}}))
    rule = one(docs, "PrometheusRule")
    plain = yaml.safe_load((REPO / "dashboards/alerts/rules.yaml").read_text(encoding="utf-8"))
    assert rule["spec"] == {"groups": plain["groups"]}
    # Prometheus' own {{ $labels.x }} templates must not have been consumed by Helm.
    assert "{{ $labels.cluster }}" in json.dumps(rule["spec"])


def test_values_rule_defaults_are_the_generators_defaults() -> None:
    from dashboards.generate import REPLICA_LABELS, RULE_DEFAULTS, RUNBOOK_URL

    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    pr = values["prometheusRule"]
    assert pr["runbookBaseUrl"] == RUNBOOK_URL
    assert tuple(pr["replicaLabels"]) == REPLICA_LABELS
    assert set(pr["rules"]) == set(RULE_DEFAULTS)
    for alert, keys in RULE_DEFAULTS.items():
        tuning = dict(pr["rules"][alert])
        assert tuning.pop("enabled") is True
        assert {k: str(v) for k, v in tuning.items()} == keys, alert


def test_prometheus_rule_selects_the_exporter_by_the_servicemonitors_job(
    chart: helm.Chart,
) -> None:
    docs = objects(render(chart, {"prometheusRule": {"enabled": True},
                                  "serviceMonitor": {"enabled": True}}))
    monitor = one(docs, "ServiceMonitor")
    job = one(docs, "Service")["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    rules = _rules(docs)
    selector = f'job="{job}", namespace="{NAMESPACE}"'
    assert rules["KafkaTxnExporterAbsent"]["expr"] == (
        f"absent_over_time(kafka_txn_exporter_build_info{{{selector}}}[1m])"
    )
    assert rules["KafkaTxnExporterTargetDown"]["expr"] == f"up{{{selector}}} == 0"


TUNED_RULES: dict[str, Any] = {
    "enabled": True,
    "runbookBaseUrl": "https://wiki.example.com/kafka/runbook",
    "additionalRuleLabels": {"team": "streaming", "severity": "ignored"},
    "replicaLabels": ["instance", "pod", "replica"],
    "rules": {
        "KafkaLateTransactions": {"for": "10m", "threshold": 4,
                                  "severity": "warning"},
        "KafkaHangingTransaction": {"for": "3m", "severity": "critical"},
        "KafkaTxnExporterAbsent": {"window": "5m", "for": "2m"},
        "KafkaTxnExporterPollsStale": {"threshold": 5, "severity": "info"},
        "KafkaTxnExporterUnobservedPartitions": {"enabled": False},
    },
}


@pytest.mark.system_tools  # promtool
def test_every_rule_setting_reaches_the_rendered_rules(chart: helm.Chart, tmp_path: Path) -> None:
    docs = objects(render(chart, {"prometheusRule": TUNED_RULES}))
    validate_all(docs)
    rules = _rules(docs)
    assert "KafkaTxnExporterUnobservedPartitions" not in rules
    late = rules["KafkaLateTransactions"]
    assert late["for"] == "10m"
    assert late["labels"] == {"severity": "warning", "team": "streaming"}
    assert late["expr"] == "cluster:kafka_partitions_with_late_transactions:held > 4"
    held = _records(docs)["cluster:kafka_partitions_with_late_transactions:held"]
    assert "without (instance, pod, replica)" in held["expr"]
    # A held series keeps exactly the labels of the verdict it is matched against.
    assert "labels" not in held
    assert "state is then unknown, not resolved" in late["annotations"]["description"]
    assert rules["KafkaHangingTransaction"]["for"] == "3m"
    assert rules["KafkaTxnExporterAbsent"]["for"] == "2m"
    assert "[5m])" in rules["KafkaTxnExporterAbsent"]["expr"]
    stale = rules["KafkaTxnExporterPollsStale"]
    assert stale["labels"]["severity"] == "info"
    assert "> 5 * max without" in stale["expr"]
    for name, rule in rules.items():
        assert rule["annotations"]["runbook_url"] == (
            f"https://wiki.example.com/kafka/runbook#{name.lower()}"
        )
        assert rule["labels"]["team"] == "streaming"
    # What Prometheus itself says about the rendered rules.
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(
        yaml.safe_dump({"groups": one(docs, "PrometheusRule")["spec"]["groups"]}),
        encoding="utf-8",
    )
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/install-test-deps"
    checked = subprocess.run([promtool, "check", "rules", str(rules_file)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules) + len(_records(docs))} rules found" in checked.stdout


def test_a_rule_setting_that_is_not_a_duration_fails_the_schema(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"prometheusRule": {"rules": {
            "KafkaHangingTransaction": {"for": "one minute"}}}})
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"prometheusRule": {"rules": {
            "KafkaHangingTransaction": {"threshold": 1}}}})


def test_dashboard_configmaps_hold_the_json_byte_for_byte_with_the_sidecar_label(
    chart: helm.Chart,
) -> None:
    docs = objects(render(chart, {"grafanaDashboards": {"enabled": True}}))
    dashboards = [d for d in by_kind(docs, "ConfigMap") if "exporter.yaml" not in d["data"]]
    files = {p.name: p.read_text(encoding="utf-8")
             for p in (CHART_DIR / "files").glob("*.json")}
    assert {name for d in dashboards for name in d["data"]} == set(files)
    for configmap in dashboards:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, content),) = configmap["data"].items()
        assert content == files[name]
        assert json.loads(content)["uid"]


# --------------------------------------------------------------------------- misc


def test_network_policy_allows_only_the_metrics_port_in_and_kafka_and_dns_out(
    chart: helm.Chart,
) -> None:
    policy = one(objects(render(chart, ALL_ON)), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert ingress["from"] == ALL_ON["networkPolicy"]["ingressFrom"]
    egress_ports = sorted(p["port"] for rule in policy["egress"] for p in rule["ports"])
    assert egress_ports == [53, 53, 9092, 9093]


def test_pdb_uses_max_unavailable_unless_min_available_is_set(chart: helm.Chart) -> None:
    default = one(objects(render(chart, {"podDisruptionBudget": {"enabled": True}})),
                  "PodDisruptionBudget")["spec"]
    assert default.get("maxUnavailable") == 1 and "minAvailable" not in default
    minimum = one(objects(render(chart, {"podDisruptionBudget": {
        "enabled": True, "minAvailable": "50%"}})), "PodDisruptionBudget")["spec"]
    assert minimum.get("minAvailable") == "50%" and "maxUnavailable" not in minimum


def test_notes_list_every_cluster(chart: helm.Chart) -> None:
    notes = render(chart, ALL_ON)["kafka-txn-exporter/templates/NOTES.txt"]
    for cluster in ALL_ON["config"]["clusters"]:
        assert cluster["name"] in notes
    assert "(SASL SCRAM-SHA-512 as kte-prod)" in notes
    assert f"deployment/{RELEASE}-kafka-txn-exporter" in notes


def test_readme_documents_every_value() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    readme = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    keys = flatten_keys(values)
    # Cluster entries are a list in values.yaml; their keys come from the schema.
    cluster_schema = schema["properties"]["config"]["properties"]["clusters"]["items"]
    keys += [f"config.clusters[].{k}" for k in flatten_keys(_schema_keys(cluster_schema))]
    missing = [k for k in keys if f"`{k}`" not in readme]
    assert missing == [], f"values missing from README.md: {missing}"


def _schema_keys(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: _schema_keys(v) if "properties" in v else None
            for k, v in schema.get("properties", {}).items()}


def test_kubernetes_validate_cli_strict_accepts_the_rendered_manifests(
    chart: helm.Chart, tmp_path: Path
) -> None:
    """The same check through kubernetes-validate's own command line (CRDs left out: see above)."""
    docs = [d for d in objects(render(chart, ALL_ON)) if d["kind"] not in CRD_KINDS]
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    cli = Path(sys.executable).with_name("kubernetes-validate")
    result = subprocess.run(
        [str(cli), "--strict", "--kubernetes-version", KUBE_VERSIONS[-1], str(manifest)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("INFO") >= len(docs)
    manifest.write_text(yaml.safe_dump_all([{**docs[0], "unexpected": 1}]), encoding="utf-8")
    failing = subprocess.run(
        [str(cli), "--strict", "--kubernetes-version", KUBE_VERSIONS[-1], str(manifest)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert failing.returncode != 0


def test_duplicate_cluster_names_fail_the_render(chart: helm.Chart) -> None:
    clusters = [{"name": "a", "bootstrap_servers": ["a:9092"]},
                {"name": "a", "bootstrap_servers": ["b:9092"]}]
    with pytest.raises(helm.HelmRenderError, match="duplicate cluster name"):
        render(chart, {"config": {"clusters": clusters}})


def test_schema_reserves_the_same_label_names_as_the_exporter(chart: helm.Chart) -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    labels = schema["properties"]["config"]["properties"]["clusters"]["items"]["properties"][
        "labels"]
    reserved = next(rule["not"]["enum"] for rule in labels["propertyNames"]["allOf"]
                    if "enum" in rule.get("not", {}))
    assert set(reserved) == set(RESERVED_LABELS)
    with pytest.raises(helm.HelmValuesError, match="invalid propertyName 'topic'"):
        chart.validate_schema({"config": {"clusters": [
            {"name": "a", "bootstrap_servers": ["a:9092"], "labels": {"topic": "x"}}]}})


# --------------------------------------------------------------------------- /metrics TLS + auth

SERVER_NAME = f"{RELEASE}-kafka-txn-exporter.{NAMESPACE}.svc"
WEB_VALUES: dict[str, Any] = {
    "config": {
        "clusters": [{"name": "dev", "bootstrap_servers": ["127.0.0.1:9"]}],
        "web": {
            "web_config_secret": {"name": "kte-web-config", "key": "web-config.yml"},
            "tls_secret": {"name": "kte-web-tls"},
        },
    },
    "serviceMonitor": {
        "enabled": True,
        "tlsConfig": {
            "ca": {"secret": {"name": "kte-scrape", "key": "ca.crt"}},
            "serverName": SERVER_NAME,
        },
        "basicAuth": {
            "username": {"name": "kte-scrape", "key": "username"},
            "password": {"name": "kte-scrape", "key": "password"},
        },
    },
    "extraArgs": ["--log.level", "debug"],
    "extraVolumes": [{"name": "extra", "configMap": {"name": "kte-extra"}}],
    "extraVolumeMounts": [{"name": "extra", "mountPath": "/etc/extra", "readOnly": True}],
}


def test_web_config_tls_and_basic_auth_render_from_secrets_only(chart: helm.Chart) -> None:
    rendered = render(chart, WEB_VALUES)
    docs = objects(rendered)
    validate_all(docs)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][3:] == ["--log.level", "debug"]
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    volumes = {v["name"]: v for v in pod["volumes"]}
    sources = volumes["web-config"]["projected"]["sources"]
    assert [(x["secret"]["name"], x["secret"]["items"][0]["path"]) for x in sources] == [
        ("kte-web-config", "web-config.yml"), ("kte-web-tls", "tls.crt"),
        ("kte-web-tls", "tls.key")]
    assert volumes["extra"] == {"name": "extra", "configMap": {"name": "kte-extra"}}
    assert {"name": "extra", "mountPath": "/etc/extra", "readOnly": True} in (
        container["volumeMounts"])
    config = yaml.safe_load(exporter_config_text(docs))
    assert config["web"]["web_config_file"] == (
        "/var/run/secrets/kafka-txn-exporter/web/web-config.yml")
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == WEB_VALUES["serviceMonitor"]["tlsConfig"]
    assert endpoint["basicAuth"] == WEB_VALUES["serviceMonitor"]["basicAuth"]
    assert "BEGIN" not in json.dumps(rendered) and "$2" not in json.dumps(rendered)


def test_web_config_file_from_an_extra_volume_and_conflicts(chart: helm.Chart) -> None:
    values = {"config": {"web": {"web_config_file": "/etc/extra/web.yml"}}}
    config = yaml.safe_load(exporter_config_text(objects(render(chart, values))))
    assert config["web"]["web_config_file"] == "/etc/extra/web.yml"
    both = {"config": {"web": {"web_config_file": "/etc/extra/web.yml",
                               "web_config_secret": {"name": "x"}}}}
    with pytest.raises(helm.HelmRenderError, match="not both"):
        render(chart, both)
    orphan_tls = {"config": {"web": {"tls_secret": {"name": "x"}}}}
    with pytest.raises(helm.HelmRenderError, match="web_config_secret"):
        render(chart, orphan_tls)
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"serviceMonitor": {"scheme": "ftp"}})
    # TLS terminated in front of the pod (e.g. a mesh): the scheme can be forced.
    forced = copy.deepcopy(WEB_VALUES)
    forced["serviceMonitor"]["scheme"] = "http"
    endpoint = one(objects(render(chart, forced)), "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "http"
    plain = one(objects(render(chart, {"serviceMonitor": {"enabled": True}})), "ServiceMonitor")
    assert plain["spec"]["endpoints"][0]["scheme"] == "http"
    assert "tlsConfig" not in plain["spec"]["endpoints"][0]


def _scrape(port: int, ca_file: Path, server_name: str, auth: tuple[str, str] | None,
            path: str = "/metrics") -> tuple[int, str]:
    """GET over TLS to 127.0.0.1, verifying the certificate against `server_name`."""
    context = ssl.create_default_context(cafile=str(ca_file))
    request = f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n"
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request += f"Authorization: Basic {token}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall((request + "\r\n").encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", errors="replace")


def test_rendered_deployment_runs_the_exporter_with_tls_and_basic_auth(
    chart: helm.Chart, tmp_path: Path
) -> None:
    """The rendered config + web config, loaded by the exporter's own loaders, start an
    exporter that Prometheus can scrape with exactly what the ServiceMonitor names."""
    import bcrypt
    from security.pki import issue

    from exporter.app import serve
    from exporter.expose.http import MetricsServer, load_web_config

    pki = tmp_path / "pki"
    pki.mkdir()
    ca = issue(pki, "ca", None, ca=True)
    issue(pki, "server", ca, dns=(SERVER_NAME,))
    password = "scrape-" + SECRET_SENTINEL
    web_config = yaml.safe_dump({
        "tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"},
        "basic_auth_users": {
            "prometheus": bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()},
    })
    secrets = {
        "kte-web-config": {"web-config.yml": web_config},
        "kte-web-tls": {"tls.crt": (pki / "server.crt").read_text(),
                        "tls.key": (pki / "server.key").read_text()},
        "kte-scrape": {"username": "prometheus", "password": password,
                       "ca.crt": (pki / "ca.crt").read_text()},
    }
    values = copy.deepcopy(WEB_VALUES)
    del values["extraVolumes"], values["extraVolumeMounts"]
    docs = objects(render(chart, values))
    root = tmp_path / "pod"
    settings = load_rendered_config(docs, root, secrets)
    assert settings.web.web_config_file is not None
    web = load_web_config(settings.web.web_config_file)
    assert web.ssl_context is not None and set(web.basic_auth_users) == {"prometheus"}

    local = dataclasses.replace(
        settings, web=dataclasses.replace(settings.web, listen_address="127.0.0.1", port=0))
    stop = threading.Event()
    started: list[MetricsServer] = []
    ready = threading.Event()

    def on_started(server: MetricsServer) -> None:
        started.append(server)
        ready.set()

    thread = threading.Thread(target=serve, args=(local,),
                              kwargs={"stop": stop, "on_started": on_started}, daemon=True)
    thread.start()
    try:
        assert ready.wait(20), "exporter did not start"
        port = started[0].port
        # What the ServiceMonitor tells Prometheus to use.
        endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
        assert endpoint["scheme"] == "https"
        tls_config, basic_auth = endpoint["tlsConfig"], endpoint["basicAuth"]

        def secret(ref: dict[str, str]) -> str:
            return secrets[ref["name"]][ref["key"]]

        ca_file = tmp_path / "scrape-ca.crt"
        ca_file.write_text(secret(tls_config["ca"]["secret"]), encoding="utf-8")
        credentials = (secret(basic_auth["username"]), secret(basic_auth["password"]))
        status, body = _scrape(port, ca_file, tls_config["serverName"], credentials)
        assert status == 200
        assert "kafka_txn_exporter_build_info" in body
        assert 'kafka_txn_exporter_up{cluster="dev"}' in body
        assert _scrape(port, ca_file, tls_config["serverName"], None)[0] == 401
        wrong = (credentials[0], "wrong")
        assert _scrape(port, ca_file, tls_config["serverName"], wrong)[0] == 401
        # The probes' paths stay open (HTTPS, no credentials), as the kubelet needs.
        assert _scrape(port, ca_file, tls_config["serverName"], None, "/healthz")[0] == 200
        # Plain HTTP gets no metrics.
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        stop.set()
        thread.join(timeout=15)


@pytest.mark.parametrize(
    "values",
    [WEB_VALUES, {"prometheusRule": TUNED_RULES}, {**ALL_ON, **WEB_VALUES}],
    ids=["web-tls-auth-extras", "tuned-rules", "all-on-with-web"],
)
def test_every_new_value_set_lints_and_validates_strictly(
    chart: helm.Chart, values: dict[str, Any]
) -> None:
    report = helm.lint(CHART_DIR, copy.deepcopy(values), strict=True, namespace=NAMESPACE,
                       kube_version="v" + KUBE_VERSIONS[0])
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    validate_all(objects(render(chart, values)))


def test_telemetry_path_reaches_the_exporter_and_the_servicemonitor(
    chart: helm.Chart, tmp_path: Path
) -> None:
    values = {"config": {"web": {"telemetry_path": "/kafka/metrics"}},
              "serviceMonitor": {"enabled": True}}
    docs = objects(render(chart, values))
    validate_all(docs)
    assert load_rendered_config(docs, tmp_path).web.telemetry_path == "/kafka/metrics"
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["path"] == "/kafka/metrics"
    defaults = objects(render(chart, {"serviceMonitor": {"enabled": True}}))
    assert one(defaults, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"


@pytest.mark.parametrize("path", ["/", "/healthz", "/readyz", "metrics", "/a b", "/m?x=1"])
def test_a_telemetry_path_the_exporter_would_refuse_fails_the_schema(
    chart: helm.Chart, path: str
) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(chart, {"config": {"web": {"telemetry_path": path}}})
