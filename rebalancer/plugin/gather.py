"""The plugin's reads: one list of each kind the controller watches, and a few single objects.

Read-only, with the user's credentials; the only module of the plugin that does I/O. A list the
views cannot do without (Nodes, pods, workloads) that fails stops the command with the reason; the
rest (DaemonSets, the eviction history, the Lease, the price file, the autoscaler's status) is
optional: what could not be read is said in `Raw.problems`, and what depends on it is skipped,
never guessed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rebalancer.controller.kaito import WORKSPACES
from rebalancer.kube.client import KubeClient
from rebalancer.kube.errors import KubeError, NotFound
from rebalancer.plugin.view import Raw, find_install, settings_from_env

PAGE = "500"
AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")

Obj = dict[str, Any]


class ReadFailed(Exception):
    """A list the command cannot do without failed; the message says which and why."""


async def list_all(client: KubeClient, path: str) -> list[Obj]:
    """Every object of a collection, page by page."""
    items: list[Obj] = []
    token = ""
    while True:
        query = {"limit": PAGE, **({"continue": token} if token else {})}
        page = await client.request("GET", path, query=query)
        items += page.get("items") or []
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


async def _required(client: KubeClient, path: str) -> list[Obj]:
    try:
        return await list_all(client, path)
    except KubeError as error:
        raise ReadFailed(f"cannot list {path}: {error}") from None


async def _optional_list(client: KubeClient, path: str, problems: list[str]) -> list[Obj] | None:
    try:
        return await list_all(client, path)
    except KubeError as error:
        problems.append(f"cannot list {path} ({error}): the checks that need it are skipped")
        return None


async def _optional_get(
    client: KubeClient, path: str, problems: list[str], *, absent_is_normal: bool = True
) -> Obj | None:
    try:
        found: Obj = await client.request("GET", path)
    except NotFound:
        if not absent_is_normal:
            problems.append(f"{path} not found")
        return None
    except KubeError as error:
        problems.append(f"cannot read {path}: {error}")
        return None
    return found


async def _nodepools(client: KubeClient, problems: list[str]) -> list[Obj] | None:
    """Karpenter's NodePools (AKS node auto-provisioning); [] on a cluster without Karpenter."""
    try:
        return await list_all(client, "/apis/karpenter.sh/v1/nodepools")
    except NotFound:
        return []
    except KubeError as error:
        problems.append(
            f"cannot list Karpenter NodePools ({error}): the NodePool checks are skipped"
        )
        return None


async def _workspaces(client: KubeClient, problems: list[str]) -> list[Obj] | None:
    """KAITO's Workspaces; [] on a cluster without KAITO."""
    try:
        return await list_all(client, WORKSPACES)
    except NotFound:
        return []
    except KubeError as error:
        problems.append(f"cannot list KAITO Workspaces ({error}): the Workspace check is skipped")
        return None


def _configmap(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps/{name}"


async def gather(client: KubeClient, namespace: str | None) -> Raw:
    """Everything `status` and `doctor` read. `namespace`: spot-rebalancer's (-n), else found by
    its chart's labels."""
    problems: list[str] = []
    nodes, pods, replicasets, deployments, statefulsets = await asyncio.gather(
        _required(client, "/api/v1/nodes"),
        _required(client, "/api/v1/pods"),
        _required(client, "/apis/apps/v1/replicasets"),
        _required(client, "/apis/apps/v1/deployments"),
        _required(client, "/apis/apps/v1/statefulsets"),
    )
    daemonsets = await _optional_list(client, "/apis/apps/v1/daemonsets", problems)
    nodepools = await _nodepools(client, problems)
    workspaces = await _workspaces(client, problems)
    install = find_install(deployments, daemonsets, namespace)
    settings, _ = settings_from_env(install.env)
    lease = settings.lease_name
    where = install.prices_configmap
    history, lease_obj, prices, autoscaler = await asyncio.gather(
        _optional_get(client, _configmap(install.namespace, f"{lease}-history"), problems),
        _optional_get(
            client,
            f"/apis/coordination.k8s.io/v1/namespaces/{install.namespace}/leases/{lease}",
            problems,
        ),
        _optional_get(client, _configmap(install.namespace, where[0]), problems)
        if where
        else asyncio.sleep(0, None),
        _optional_get(client, _configmap(*AUTOSCALER_STATUS), problems),
    )
    return Raw(
        nodes=nodes,
        pods=pods,
        replicasets=replicasets,
        deployments=deployments,
        statefulsets=statefulsets,
        daemonsets=daemonsets,
        nodepools=nodepools,
        workspaces=workspaces,
        history=history,
        lease=lease_obj,
        prices=prices,
        autoscaler=autoscaler,
        problems=tuple(problems),
    )
