"""The tests' tap on the emulator's API server (tests/tap.py), through our real client: what it
records, the faults it answers and the cut, as a client sees them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer import __version__
from rebalancer.kube.client import KubeClient
from rebalancer.kube.errors import Conflict, NotFound, ServerError, TooManyRequests
from rebalancer_sim import resources as R
from tests.tap import api_server

NODE = {"metadata": {"name": "n1"}, "spec": {}}
PATCH = {"metadata": {"labels": {"a": "b"}}}


async def client_of(path: Path, identity: str) -> KubeClient:
    return await KubeClient.connect(
        str(path), user_agent=f"spot-rebalancer/{__version__} (controller; {identity})"
    )


async def test_requests_in_order_with_answer_and_sender(tmp_path: Path) -> None:
    async with api_server(tmp_path, (R.NODES, NODE)) as (cluster, tap):
        client = await client_of(cluster.kubeconfig_path, "ctl-a")
        try:
            await client.request("GET", "/api/v1/nodes/n1")
            await client.request(
                "PATCH", "/api/v1/nodes/n1", body=PATCH, content_type="application/merge-patch+json"
            )
            with pytest.raises(NotFound):
                await client.request("GET", "/apis/kaito.sh/v1beta1/workspaces")
        finally:
            await client.close()
    first, patch, unserved = tap.requests
    assert (first.method, first.resource, first.name, first.status) == ("GET", "nodes", "n1", 200)
    assert (patch.method, patch.body, patch.status, patch.who) == ("PATCH", PATCH, 200, "ctl-a")
    assert patch.content_type == "application/merge-patch+json"
    assert (unserved.resource, unserved.status) == ("workspaces", 404)
    assert tap.written() == [patch]
    labels = cluster.store.get(R.NODES, "", "n1")["metadata"]["labels"]
    assert labels == {"a": "b"}


async def test_faults_answer_with_a_status_and_apply_nothing(tmp_path: Path) -> None:
    async with api_server(tmp_path, (R.NODES, NODE)) as (cluster, tap):
        tap.fail("PATCH", "/nodes/n1", 409, times=1, message="modified")
        tap.fail(
            "PATCH", "/nodes/n1", 429, times=1, retry_after_seconds=1,
            causes=[{"reason": "DisruptionBudget", "message": "needs 1 healthy pod"}],
        )  # fmt: skip
        client = await client_of(cluster.kubeconfig_path, "ctl-a")
        try:
            with pytest.raises(Conflict):
                await client.request(
                    "PATCH", "/api/v1/nodes/n1", body=PATCH,
                    content_type="application/merge-patch+json",
                )  # fmt: skip
            with pytest.raises(TooManyRequests) as refused:
                await client.request(
                    "PATCH", "/api/v1/nodes/n1", body=PATCH,
                    content_type="application/merge-patch+json",
                )  # fmt: skip
            assert refused.value.is_disruption_budget
            assert "labels" not in cluster.store.get(R.NODES, "", "n1")["metadata"]
            tap.cut = lambda request: request.who == "ctl-a"
            with pytest.raises(ServerError):  # a 503 from the path
                await client.request("GET", "/api/v1/nodes/n1")
        finally:
            await client.close()
    assert [r.status for r in tap.requests] == [409, 429, 503]
    assert [r.status for r in tap.refused("nodes")] == [409, 429]
