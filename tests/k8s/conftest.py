"""Fixtures for the end-to-end tests on the real control plane."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane
from tests.k8s.rig import ChartRbac, KubeRig, install_chart_rbac, kube_rig

# The chart's placement webhook, served by the controller process: for every test here.
from tests.k8s.test_webhook import webhook  # noqa: F401


@pytest.fixture(scope="session")
def chart_rbac(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> ChartRbac:
    return install_chart_rbac(control_plane, tmp_path_factory.mktemp("chart"))


@pytest.fixture
async def rig(
    control_plane: ControlPlane, chart_rbac: ChartRbac, tmp_path: Path
) -> AsyncIterator[KubeRig]:
    async with kube_rig(control_plane, chart_rbac, tmp_path) as rig:
        yield rig
