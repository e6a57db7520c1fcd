"""The chart's values for the SASL mechanisms beyond passwords: OAUTHBEARER (client secret, CA
or a platform's token from existing Secrets), GSSAPI (keytab from a Secret, krb5.conf from a
ConfigMap) and AWS MSK IAM (no Secret: IRSA through the service account's annotation). Each
is rendered, validated against Kubernetes' schemas, linted strictly, and its credentials are
only referenced: projected as files whose paths the config names."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from test_chart import (
    CHART_DIR,
    KUBE_VERSIONS,
    NAMESPACE,
    by_kind,
    exporter_config_text,
    load_rendered_config,
    objects,
    one,
    render,
    validate_all,
)

CREDENTIALS_DIR = "/var/run/secrets/kafka-txn-exporter"
IRSA_ROLE = "arn:aws:iam::123456789012:role/kafka-txn-exporter"

MSK_CLUSTER: dict[str, Any] = {
    "name": "msk",
    "bootstrap_servers": ["b-1.msk.abcd12.c2.kafka.eu-west-1.amazonaws.com:9098"],
    "tls": {"enabled": True},
    "sasl": {"mechanism": "AWS_MSK_IAM", "aws_msk_iam": {
        "region": "eu-west-1", "role_arn": "arn:aws:iam::210987654321:role/msk-reader",
        "role_session_name": "kafka-txn-exporter"}},
}
AUTH_VALUES: dict[str, Any] = {
    "config": {"clusters": [
        MSK_CLUSTER,
        {
            "name": "confluent",
            "bootstrap_servers": ["pkc-abc.eu-west-1.aws.confluent.cloud:9092"],
            "tls": {"enabled": True},
            "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {
                "token_endpoint_url": "https://idp.example.com/oauth2/token",
                "client_id": "kafka-txn-exporter",
                "scope": "kafka",
                "extensions": {"logicalCluster": "lkc-abc123", "identityPoolId": "pool-xyz"},
                "client_secret_secret": {"name": "kte-oauth", "key": "client-secret"},
                "ca_secret": {"name": "idp-ca"},
            }},
        },
        {
            "name": "platform",
            "bootstrap_servers": ["kafka.platform:9093"],
            "tls": {"enabled": True},
            "sasl": {"mechanism": "OAUTHBEARER",
                     "oauthbearer": {"token_secret": {"name": "kafka-token", "key": "jwt"}}},
        },
        {
            "name": "onprem",
            "bootstrap_servers": ["kafka-1.corp.example.com:9093"],
            "sasl": {"mechanism": "GSSAPI", "gssapi": {
                "principal": "kafka-txn-exporter@EXAMPLE.COM",
                "service_name": "kafka",
                "keytab_secret": {"name": "kte-keytab"},
                "krb5_conf_configmap": {"name": "krb5-conf"},
            }},
        },
    ]},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": IRSA_ROLE}},
    "networkPolicy": {"enabled": True, "egress": {
        "enabled": True,
        "kafkaPorts": [9092, 9093, 9098],
        "extraRules": [
            {"ports": [{"port": 443, "protocol": "TCP"}]},
            {"ports": [{"port": 88, "protocol": "TCP"}, {"port": 88, "protocol": "UDP"}]},
        ],
    }},
}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def docs(chart: helm.Chart) -> list[dict[str, Any]]:
    return objects(render(chart, AUTH_VALUES))


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_sasl_values_lint_strictly(kube_version: str) -> None:
    report = helm.lint(CHART_DIR, copy.deepcopy(AUTH_VALUES), strict=True, namespace=NAMESPACE,
                       kube_version="v" + kube_version)
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_sasl_values_render_valid_objects(docs: list[dict[str, Any]]) -> None:
    validate_all(docs)


def test_each_mechanisms_credentials_are_files_named_in_the_config(
    docs: list[dict[str, Any]],
) -> None:
    config = yaml.safe_load(exporter_config_text(docs))
    msk, confluent, platform, onprem = (c["sasl"] for c in config["clusters"])
    assert msk == MSK_CLUSTER["sasl"]  # nothing to mount: the AWS chain
    assert confluent == {"mechanism": "OAUTHBEARER", "oauthbearer": {
        "token_endpoint_url": "https://idp.example.com/oauth2/token",
        "client_id": "kafka-txn-exporter",
        "scope": "kafka",
        "extensions": {"logicalCluster": "lkc-abc123", "identityPoolId": "pool-xyz"},
        "client_secret_file": f"{CREDENTIALS_DIR}/1/oauth-client-secret",
        "ca_file": f"{CREDENTIALS_DIR}/1/oauth-ca.crt",
    }}
    assert platform == {"mechanism": "OAUTHBEARER",
                        "oauthbearer": {"token_file": f"{CREDENTIALS_DIR}/2/oauth-token"}}
    assert onprem == {"mechanism": "GSSAPI", "gssapi": {
        "principal": "kafka-txn-exporter@EXAMPLE.COM",
        "service_name": "kafka",
        "keytab_file": f"{CREDENTIALS_DIR}/3/krb5.keytab",
        "krb5_conf_file": f"{CREDENTIALS_DIR}/3/krb5.conf",
    }}

    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}

    def projected(index: int) -> set[tuple[str, str, str, str]]:
        name = f"cluster-{index}-credentials"
        assert mounts[name] == {"name": name, "mountPath": f"{CREDENTIALS_DIR}/{index}",
                                "readOnly": True}
        return {
            (kind, source[kind]["name"], item["key"], item["path"])
            for source in volumes[name]["projected"]["sources"]
            for kind in ("secret", "configMap") if kind in source
            for item in source[kind]["items"]
        }

    assert "cluster-0-credentials" not in volumes  # MSK IAM: no Secret at all
    assert projected(1) == {("secret", "kte-oauth", "client-secret", "oauth-client-secret"),
                            ("secret", "idp-ca", "ca.crt", "oauth-ca.crt")}
    assert projected(2) == {("secret", "kafka-token", "jwt", "oauth-token")}
    assert projected(3) == {("secret", "kte-keytab", "krb5.keytab", "krb5.keytab"),
                            ("configMap", "krb5-conf", "krb5.conf", "krb5.conf")}
    assert by_kind(docs, "Secret") == []


def test_irsa_annotation_and_extra_egress_rules(docs: list[dict[str, Any]]) -> None:
    account = one(docs, "ServiceAccount")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": IRSA_ROLE}
    egress = one(docs, "NetworkPolicy")["spec"]["egress"]
    assert {"ports": [{"port": 443, "protocol": "TCP"}]} in egress
    assert {"ports": [{"port": 88, "protocol": "TCP"}, {"port": 88, "protocol": "UDP"}]} in egress


def test_the_msk_config_is_accepted_by_the_exporters_loader(
    chart: helm.Chart, tmp_path: Path
) -> None:
    docs = objects(render(chart, {"config": {"clusters": [MSK_CLUSTER]}}))
    settings = load_rendered_config(docs, tmp_path)
    (cluster,) = settings.clusters
    assert cluster.tls is not None and cluster.tls.ca_file is None  # the system CAs
    assert cluster.sasl is not None and cluster.sasl.aws_msk_iam is not None
    assert cluster.sasl.aws_msk_iam.region == "eu-west-1"
    assert cluster.sasl.aws_msk_iam.role_arn == "arn:aws:iam::210987654321:role/msk-reader"


def test_msk_iam_without_tls_fails_the_render_naming_the_value(chart: helm.Chart) -> None:
    cluster = {**MSK_CLUSTER, "tls": {"enabled": False}}
    with pytest.raises(Exception, match=r"config\.clusters\[0\]\.tls\.enabled: required with "
                                        r"sasl\.mechanism AWS_MSK_IAM"):
        render(chart, {"config": {"clusters": [cluster]}})


def _cluster(sasl: dict[str, Any]) -> dict[str, Any]:
    return {"config": {"clusters": [{"name": "a", "bootstrap_servers": ["a:9093"],
                                     "tls": {"enabled": True}, "sasl": sasl}]}}


@pytest.mark.parametrize("sasl", [
    {"mechanism": "OAUTHBEARER",
     "oauthbearer": {"token_endpoint_url": "https://idp/t", "client_id": "c",
                     "client_secret": "inline-secret-not-allowed"}},
    {"mechanism": "OAUTHBEARER",
     "oauthbearer": {"token_endpoint_url": "https://idp/t", "client_id": "c"}},
    {"mechanism": "OAUTHBEARER", "oauthbearer": {
        "token_endpoint_url": "https://idp/t", "client_id": "c",
        "client_secret_secret": {"name": "s"}, "token_secret": {"name": "t"}}},
    {"mechanism": "OAUTHBEARER"},
    {"mechanism": "GSSAPI", "gssapi": {"principal": "p@R", "keytab": "inline-bytes"}},
    {"mechanism": "GSSAPI", "gssapi": {"principal": "p@R"}, "password_secret": {"name": "s"}},
    {"mechanism": "AWS_MSK_IAM", "username": "u"},
    {"mechanism": "AWS_MSK_IAM", "aws_msk_iam": {"region": "eu-west-1",
                                                 "secret_access_key": "inline"}},
    {"mechanism": "AWS_MSK_IAM", "aws_msk_iam": {"region": "Ireland"}},
    {"mechanism": "PLAIN", "username": "u", "password_secret": {"name": "s"},
     "aws_msk_iam": {"region": "eu-west-1"}},
], ids=["oauth-inline-secret", "oauth-no-secret", "oauth-secret-and-token", "oauth-no-section",
        "gssapi-inline-keytab", "gssapi-with-password", "msk-with-username",
        "msk-inline-key", "msk-bad-region", "plain-with-msk-section"])
def test_wrong_sasl_values_are_rejected_by_the_schema(
    chart: helm.Chart, sasl: dict[str, Any]
) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(_cluster(sasl))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.slow
def test_the_rendered_msk_config_runs_with_irsa_credentials(
    chart: helm.Chart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the pod does: the config the chart renders for an MSK cluster (CA from a Secret),
    credentials as EKS injects them for the service account's role annotation (IRSA: role ARN,
    web identity token file, region), exchanged at STS (a loopback fake), and a login the
    simulated MSK broker verifies. The exporter finds the hanging transaction."""
    import dataclasses
    import os
    import threading

    from collect.aws_fakes import fake_aws
    from kafka_sim.cluster import SimCluster, SimTls
    from kafka_sim.msk_iam import MskIamAuthority, MskIamKey, MskIamVerifier
    from kafka_sim.seed import seed_hanging_transaction
    from security.pki import make_pki
    from test_e2e_serve import http_get, samples, wait_until

    from exporter.app import serve
    from exporter.expose.http import MetricsServer

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    authority = MskIamAuthority(MskIamVerifier("eu-west-1", {"ASIAIRSA0001": MskIamKey(
        "fake-secret-ASIAIRSA-1", "fake-session-ASIAIRSA-1", "irsa")}))
    tls = SimTls(cert_file=pki.crt("broker"), key_file=pki.key("broker"), ca_file=pki.crt("ca"))
    with fake_aws() as aws, SimCluster(
        brokers=2, topics={"t": 2}, tls=tls, sasl_authority=authority,
        broker_config={"transaction.max.timeout.ms": "60000",
                       "transaction.partition.verification.enable": "false"},
    ) as sim:
        sim.call(seed_hanging_transaction, sim.state, "msk-chart-hang", "t", 1,
                 last_timestamp_ms=sim.clock.now_ms() - 400_000)
        values = {
            "config": {
                "clusters": [{
                    "name": "msk",
                    "bootstrap_servers": sim.bootstrap_servers.split(","),
                    "late_buffer_seconds": 10,
                    "min_reported_duration_seconds": 0,
                    "poll_interval_seconds": 1,
                    "tls": {"enabled": True, "ca_secret": {"name": "msk-ca"}},
                    "sasl": {"mechanism": "AWS_MSK_IAM", "aws_msk_iam": {"region": "eu-west-1"}},
                }],
                "web": {"listen_address": "127.0.0.1", "port": free_port()},
            },
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": IRSA_ROLE}},
        }
        docs = objects(render(chart, values))
        validate_all(docs)
        role = one(docs, "ServiceAccount")["metadata"]["annotations"][
            "eks.amazonaws.com/role-arn"]
        token_file = tmp_path / "eks.amazonaws.com" / "serviceaccount" / "token"
        token_file.parent.mkdir(parents=True)
        token_file.write_text("eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.sig")
        for name in [n for n in os.environ if n.startswith("AWS_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        # What the EKS pod identity webhook injects for the annotated service account.
        monkeypatch.setenv("AWS_ROLE_ARN", role)
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
        monkeypatch.setenv("AWS_REGION", "eu-west-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", aws.url)

        settings = load_rendered_config(
            docs, tmp_path / "pod", {"msk-ca": {"ca.crt": Path(pki.crt("ca")).read_text()}})
        assert settings.clusters[0].sasl is not None
        assert settings.clusters[0].sasl.aws_msk_iam is not None
        assert settings.clusters[0].sasl.aws_msk_iam.region == "eu-west-1"
        stop, ready = threading.Event(), threading.Event()
        started: list[MetricsServer] = []

        def on_started(server: MetricsServer) -> None:
            started.append(server)
            ready.set()

        local = dataclasses.replace(settings, clusters=tuple(
            dataclasses.replace(c, request_timeout_seconds=3.0) for c in settings.clusters))
        thread = threading.Thread(target=serve, args=(local,),
                                  kwargs={"stop": stop, "on_started": on_started}, daemon=True)
        thread.start()
        try:
            assert ready.wait(30), "exporter did not start"
            base = f"http://127.0.0.1:{started[0].port}"
            wait_until(lambda: http_get(base + "/readyz")[0] == 200, 30, "/readyz 200")
            metrics = samples(http_get(base + "/metrics")[1])
        finally:
            stop.set()
            thread.join(timeout=15)
    assert metrics[("kafka_txn_exporter_up", frozenset({("cluster", "msk")}))] == 1
    late = [dict(labels) for (name, labels) in metrics
            if name == "kafka_late_transaction_age_seconds"]
    assert [(x["topic"], x["partition"], x["classification"]) for x in late] == [
        ("t", "1", "hanging")]
    forms = [form for _, _, form in aws.requests]
    assert [(f["Action"], f["RoleArn"]) for f in forms] == [
        ("AssumeRoleWithWebIdentity", IRSA_ROLE)]
    assert set(authority.principals) == {"irsa"}
