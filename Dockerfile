# One image for both processes: `rebalancer agent` (DaemonSet) and `rebalancer controller`
# (Deployment) are subcommands of the same entry point.
#
# The base is pinned by an exact patch tag. For production, also pin it by digest, e.g.
#   FROM python:3.11.14-slim-bookworm@sha256:<digest> AS base
# (`docker buildx imagetools inspect python:3.11.14-slim-bookworm` prints it). No digest is written
# here because none could be resolved on the machine this was written on (no container engine
# or registry access); let Renovate or Dependabot add and refresh it.
# Both stages start from this one base, so the venv's python symlink
# (/opt/rebalancer/bin/python -> /usr/local/bin/python3.11) is valid in the final image.
FROM python:3.11.14-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# ---- builder: build our wheel and install it with its dependencies into a venv ----------------
FROM base AS builder

WORKDIR /src
# Only what the wheel needs (.dockerignore keeps the rest of the tree out of the context).
COPY pyproject.toml README.md ./
COPY rebalancer ./rebalancer

# Every dependency ships manylinux wheels for CPython 3.11 (amd64 and arm64), so no compiler is
# installed even here. pip compiles .pyc files at install time, which matters because the pod's
# root filesystem is read-only and Python could not write them later.
RUN python -m venv /opt/rebalancer \
 && /opt/rebalancer/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/rebalancer/bin/pip install /wheels/*.whl \
 && /opt/rebalancer/bin/pip uninstall --yes pip setuptools \
 && /opt/rebalancer/bin/rebalancer version

# ---- final: the base image plus the venv, nothing else -----------------------------------------
FROM base

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="spot-rebalancer" \
      org.opencontainers.image.description="Keeps GPU inference available on Azure spot VMs in AKS: node agent (rebalancer agent) and controller (rebalancer controller)." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="python:3.11.14-slim-bookworm"

COPY --from=builder /opt/rebalancer /opt/rebalancer
ENV PATH=/opt/rebalancer/bin:$PATH

# Numeric user and group (distroless "nonroot"): Kubernetes can verify runAsNonRoot only when the
# image's USER is numeric. The chart sets the same ids in the pod securityContext.
USER 65532:65532
# The agent's /metrics, /healthz and /readyz.
EXPOSE 9101
ENTRYPOINT ["rebalancer"]
CMD ["--help"]
