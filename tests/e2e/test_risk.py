"""The real controller process with both Azure risk APIs on: Workload Identity through the
token emulator (TLS, the webhook's environment variables), Resource Graph and the Spot Placement
Score API through the ARM emulator; the risk it exports and logs is the formula's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.azure.emulators import ArmEmulator, TokenEmulator, self_signed_tls
from tests.e2e.rig import running
from tests.helpers import serve

pytestmark = pytest.mark.e2e

A100 = "Standard_NC24ads_A100_v4"
GROUP = f'pool="gpuspot",sku="{A100}",zone="eastus-1"'


def risk(source: str) -> str:
    """A sample of the risk gauge as the exposition writes it (labels sorted)."""
    return f'rebalancer_pool_eviction_risk{{pool="gpuspot",sku="{A100}",source="{source}",zone="eastus-1"}}'


async def test_the_controller_exports_the_risk_of_its_spot_pool_from_azure_data(
    tmp_path: Path,
) -> None:
    tls, certificate = self_signed_tls(tmp_path)
    tokens = TokenEmulator()
    arm = ArmEmulator(
        tokens=tokens,
        eviction_rates={(A100.lower(), "eastus"): "10-15%"},
        placement_scores={(A100.lower(), "eastus", "1"): "Low"},
    )
    federated = tmp_path / "azure-identity-token"
    federated.write_text("projected-serviceaccount-token")
    async with (
        serve(tokens.app(), ssl_context=tls) as authority,
        serve(arm.app()) as management,
        running(tmp_path) as rig,
    ):
        rig.start_agents()
        rig.start_controller(
            REBALANCER_COST_INTERVAL_SECONDS="0.5",
            REBALANCER_RISK_RESOURCE_GRAPH_ENABLED="true",
            REBALANCER_RISK_PLACEMENT_SCORE_ENABLED="true",
            REBALANCER_AZURE_SUBSCRIPTION_ID=arm.subscription_id,
            REBALANCER_AZURE_MANAGEMENT_URL=management,
            # What AKS's workload identity webhook puts in the pod (and trust in the emulator).
            AZURE_AUTHORITY_HOST=authority,
            AZURE_TENANT_ID=tokens.tenant_id,
            AZURE_CLIENT_ID=tokens.client_id,
            AZURE_FEDERATED_TOKEN_FILE=str(federated),
            SSL_CERT_FILE=str(certificate),
        )
        await rig.until_ready()
        await rig.wait_for_metric(
            "controller-0", f"rebalancer_spot_placement_score{{{GROUP}}}", 1, timeout=20
        )
        await rig.wait_for_metric(
            "controller-0",
            risk("resource_graph"),
            0.125,
            timeout=20,
        )
        # Bucket 10-15 -> 0.125, Low in zone 1 -> x2; the history has watched seconds, so it
        # moves the prior by a fraction of a percent at most.
        estimate = await rig.metric("controller-0", risk("estimate"))
        assert estimate == pytest.approx(0.25, rel=0.01)
        assert (
            await rig.metric("controller-0", f"rebalancer_pool_eviction_risk_level{{{GROUP}}}") == 2
        )
        errors = await rig.metric("controller-0", "rebalancer_risk_refresh_errors_total{")
        assert errors == 0
        # One token for both APIs, traded for the projected ServiceAccount token.
        assert tokens.assertions == ["projected-serviceaccount-token"]
        assert {path.split("/")[1] for path, _ in arm.requests} == {"providers", "subscriptions"}
        logged = [
            json.loads(line)
            for line in (tmp_path / "controller-0.log").read_text().splitlines()
            if '"eviction risk"' in line
        ]
        high = [entry for entry in logged if entry.get("pool") == "gpuspot"][-1]
        assert high["risk_level"] == "high"
        assert "bucket 10-15 % per hour" in high["reasons"]
        assert f"Low for {A100} in eastus zone 1 -> x2" in high["reasons"]
