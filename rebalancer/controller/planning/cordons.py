"""Cordon a node under notice, and restore it exactly when the notice is gone."""

from __future__ import annotations

from collections.abc import Mapping

from rebalancer import names
from rebalancer.controller.actions import Action, Cordon, Restore
from rebalancer.controller.contain import Containment, on_node
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.snapshot import Snapshot
from rebalancer.notices import Notice


def cordons(snapshot: Snapshot, active: Mapping[str, Notice], contain: Containment) -> Proposal:
    """Cordon, taint and exclude from load balancers each node under notice (recording its state
    before, so that a cancellation restores it exactly); restore a node whose notice is gone."""
    actions: list[Action] = []
    for name, node in snapshot.nodes.items():
        actions += contain.run("cordon", on_node(name), [], _cordon_one, node, active.get(name))
    return Proposal.of(actions)


def _cordon_one(node: NodeInfo, notice: Notice | None) -> list[Action]:
    recorded = node.annotations.get(names.CORDONED_FOR)
    if notice is not None and recorded is None:
        cordon = Cordon(
            node.name, notice.event_id, notice.event_type, basis=node.as_json(), uid=node.uid
        )
        return [cordon]
    if notice is None and recorded is not None:
        return [Restore(node.name, recorded, basis=node.as_json(), uid=node.uid)]
    return []
