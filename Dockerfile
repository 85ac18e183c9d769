# One image for both processes: `rebalancer agent` (DaemonSet) and `rebalancer controller`
# (Deployment) are subcommands of the same entry point.
#
# The base is pinned by digest: the multi-arch index of python:3.11.15-slim-bookworm as recorded
# by the Docker official images' own registry record (github.com/docker-library/repo-info,
# repos/python/remote/3.11.15-slim-bookworm.md, commit 3effc3ea). It could not be resolved from a
# registry on the machine this was written on (none serves images there); a digest that does not
# exist fails the build at pull time, it can never pull something else. `docker buildx imagetools
# inspect python:3.11.15-slim-bookworm` shows the current one; let Renovate or Dependabot refresh it.
# BASE_IMAGE exists so a build can substitute a base (scripts/build-image, the test suite's
# stand-in for machines without a registry) without editing this file.
# Both stages start from this one base, so the venv's python symlink
# (/opt/rebalancer/bin/python -> /usr/local/bin/python3.11) is valid in the final image.
ARG BASE_IMAGE=python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3
FROM ${BASE_IMAGE} AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# ---- builder: build our wheel and install it with its dependencies into a venv ----------------
FROM base AS builder

WORKDIR /src
# Only what the wheel needs (.dockerignore keeps the rest of the tree out of the context): the
# developer package in sim/ (cluster emulator, demo) is never copied.
COPY requirements.lock requirements-build.lock pyproject.toml README.md ./
COPY rebalancer ./rebalancer

# Every third-party file is checked against the sha256 in the lock files (scripts/lock makes
# them); --no-deps and --require-hashes refuse anything the locks do not pin. Then our own package
# without dependencies and without fetching a build backend (setuptools came from the lock).
# Every dependency ships manylinux wheels for CPython 3.11 (amd64 and arm64), so no compiler is
# installed even here. pip compiles .pyc files at install time, which matters because the pod's
# root filesystem is read-only and Python could not write them later.
RUN python -m venv /opt/rebalancer \
 && /opt/rebalancer/bin/pip install --require-hashes --no-deps \
      -r requirements.lock -r requirements-build.lock \
 && /opt/rebalancer/bin/pip install --no-deps --no-build-isolation --no-index . \
 && /opt/rebalancer/bin/pip check \
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
      org.opencontainers.image.base.name="python:3.11.15-slim-bookworm"

COPY --from=builder /opt/rebalancer /opt/rebalancer
ENV PATH=/opt/rebalancer/bin:$PATH

# Numeric user and group (distroless "nonroot"): Kubernetes can verify runAsNonRoot only when the
# image's USER is numeric. The chart sets the same ids in the pod securityContext.
USER 65532:65532
# The agent's /metrics, /healthz and /readyz.
EXPOSE 9101
ENTRYPOINT ["rebalancer"]
CMD ["--help"]
