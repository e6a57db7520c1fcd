# syntax=docker/dockerfile:1
#
# kafka-txn-exporter container image.
#
#   docker build -t kafka-txn-exporter:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#
# Two stages built from the same base so the virtual environment's interpreter
# symlinks stay valid when the venv is copied: the build stage runs
# `pip install .` (with a compiler for the gssapi binding, which ships no Linux wheel), the
# runtime stage only receives /opt/venv (MIT Kerberos' shared library is in the base).
# Without Docker or a registry: scripts/build-image (buildah; PYTHON_IMAGE = a local
# Debian stand-in for the base). tests/deploy/test_image.py builds and runs it that way.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# Only what `pip install .` reads (see also .dockerignore, an allow-list).
COPY pyproject.toml README.md ./
COPY exporter ./exporter

# The source revision, installed with the package for `--version` and build_info
# (exporter/version.py); "unknown" when the build argument is not given.
ARG REVISION=unknown
RUN python -c 'import sys; open("exporter/_revision.py", "w").write(f"REVISION = {sys.argv[1]!r}\n")' "$REVISION"

# Optional extras of the distribution besides kerberos (always in the image),
# comma-separated: aws (botocore, for SASL mechanism AWS_MSK_IAM) by default; e.g.
# EXTRAS=aws,history (pyarrow, for the Helm chart's config.history).
ARG EXTRAS="aws"

# The kerberos extra's `gssapi` binding ships no Linux wheel: it is compiled here against
# Debian's MIT Kerberos (headers and krb5-config), and Python's headers when the base lacks
# them. Only this stage has the compiler; the runtime stage gets the shared libraries.
# hadolint ignore=DL3008,SC2086
RUN apt-get update \
    && include="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    && headers="libkrb5-dev" && { [ -e "$include/Python.h" ] || headers="libkrb5-dev python3-dev"; } \
    && apt-get install -y --no-install-recommends gcc libc6-dev $headers \
    && rm -rf /var/lib/apt/lists/*

# `pip install .` pre-compiles the installed modules to .pyc, so the runtime
# never needs to write bytecode (read-only root filesystem).
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "/src[kerberos${EXTRAS:+,$EXTRAS}]" \
    && /opt/venv/bin/kafka-txn-exporter --version


FROM ${PYTHON_IMAGE} AS runtime

# Re-declared: a global ARG is not visible inside a stage otherwise (base.name label).
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown

LABEL org.opencontainers.image.title="kafka-txn-exporter" \
      org.opencontainers.image.description="Prometheus exporter that finds late and hanging Kafka transactions (KIP-664 metrics)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="kafka-txn-exporter" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

# Fixed numeric ids so Kubernetes' runAsNonRoot can verify them without
# reading /etc/passwd; the chart uses the same uid/gid (values.yaml).
RUN groupadd --system --gid 10001 exporter \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin exporter

COPY --from=build /opt/venv /opt/venv

# The gssapi binding loads MIT Kerberos' libgssapi_krb5.so.2, which the base already has
# (Python's standard library pulls it in through libtirpc); fail the build if it does not.
RUN /opt/venv/bin/python -c "import gssapi.raw"

# PYTHONDONTWRITEBYTECODE: never try to write __pycache__ under a read-only root.
# The health-check URL is overridable for deployments that change web.port.
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KAFKA_TXN_EXPORTER_HEALTHCHECK_URL=http://127.0.0.1:9981/healthz

USER 10001:10001
WORKDIR /tmp
EXPOSE 9981

# No curl in a slim image: urllib raises on connection errors and non-2xx
# statuses, which makes the interpreter exit non-zero.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['KAFKA_TXN_EXPORTER_HEALTHCHECK_URL'], timeout=4).close()"]

ENTRYPOINT ["kafka-txn-exporter"]
CMD ["serve", "--config", "/etc/kafka-txn-exporter/exporter.yaml"]
