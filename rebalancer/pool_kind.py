"""Which pool a Node belongs to, spot or not, and the node labels that select that pool.

Two kinds of pools live side by side on AKS:

- a VMSS agent pool: Nodes labelled `kubernetes.azure.com/agentpool=<name>`, spot when
  `kubernetes.azure.com/scalesetpriority=spot`; the cluster autoscaler grows it;
- a Karpenter NodePool (AKS node auto-provisioning, KAITO): Nodes labelled
  `karpenter.sh/nodepool=<name>` and `karpenter.sh/capacity-type=spot|on-demand|reserved`. One
  NodePool may allow both capacity types, so its spot and its on-demand Nodes are two pools here,
  named `<nodepool>:<capacity type>` (`:` is in no NodePool or agent pool name). Under the AKS
  machine API every NAP Node carries the one machines agent pool's `agentpool` label
  (karpenter-provider-azure `--aks-machines-pool-name`), so the NodePool label wins.

Placement selects a pool by labels Karpenter provisions for (`karpenter.sh/nodepool`,
`karpenter.sh/capacity-type`): a pending pod that requires them makes Karpenter launch a node of
that NodePool and capacity type. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from rebalancer import names

SEPARATOR: Final = ":"
SPOT: Final = "spot"
ON_DEMAND: Final = "on-demand"
CAPACITY_TYPES: Final = ("spot", "on-demand", "reserved")  # Karpenter's well-known values


def is_karpenter(pool: str) -> bool:
    return SEPARATOR in pool


def split(pool: str) -> tuple[str, str]:
    """A Karpenter pool's NodePool and capacity type; ("", "") for an agent pool."""
    if not is_karpenter(pool):
        return "", ""
    nodepool, _, capacity = pool.rpartition(SEPARATOR)
    return nodepool, capacity


def pool_of(labels: Mapping[str, str]) -> str:
    """The pool a Node with these labels is in ("" if it shows none)."""
    nodepool = labels.get(names.KARPENTER_NODEPOOL_LABEL)
    if nodepool:
        return f"{nodepool}{SEPARATOR}{capacity_type(labels)}"
    return labels.get(names.AKS_AGENTPOOL_LABEL, "")


def capacity_type(labels: Mapping[str, str]) -> str:
    """spot, on-demand (or Karpenter's reserved), from Karpenter's label where there is one,
    else from AKS's priority label (absent on on-demand VMSS nodes)."""
    given = labels.get(names.KARPENTER_CAPACITY_TYPE_LABEL)
    if given:
        return given
    return SPOT if labels.get(names.AKS_SPOT_LABEL) == SPOT else ON_DEMAND


def is_spot(labels: Mapping[str, str]) -> bool:
    return capacity_type(labels) == SPOT


def policy_name(pool: str) -> str:
    """The name a workload's `pools` policy uses for this pool: the NodePool's, or the agent
    pool's."""
    return split(pool)[0] or pool


def labels_of(pool: str) -> dict[str, str]:
    """The labels every Node of the pool carries that say which pool it is."""
    nodepool, capacity = split(pool)
    if nodepool:
        return {
            names.KARPENTER_NODEPOOL_LABEL: nodepool,
            names.KARPENTER_CAPACITY_TYPE_LABEL: capacity,
        }
    return {names.AKS_AGENTPOOL_LABEL: pool}


def selector(pool: str) -> list[dict[str, Any]]:
    """Node selector requirements that select the pool's Nodes, and that Karpenter provisions
    for when no Node matches yet."""
    return [
        {"key": key, "operator": "In", "values": [value]} for key, value in labels_of(pool).items()
    ]
