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
# `pip install .` (all runtime dependencies ship wheels, so no compiler is
# needed even there), the runtime stage only receives /opt/venv.
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

# Optional extras of the distribution, comma-separated: aws (botocore, for SASL mechanism
# AWS_MSK_IAM) by default; e.g. EXTRAS=aws,history (pyarrow, for the Helm chart's
# config.history).
ARG EXTRAS="aws"

# `pip install .` pre-compiles the installed modules to .pyc, so the runtime
# never needs to write bytecode (read-only root filesystem).
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "/src${EXTRAS:+[$EXTRAS]}" \
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
