"""`rebalancer simulate`'s world follows Kubernetes' rules, the emulator's (`rebalancer.upstream`,
checked against the real control plane in tests/sim/test_scale_down_order.py and
test_scheduler_scoring.py): the ReplicaSet removes the replica upstream's would, the scheduler
matches node affinity as upstream's does."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rebalancer.simulate.workload import parse_distribution
from rebalancer.simulate.world import Deployment, Pod, PoolModel, World
from tests.simulate.world_kit import scenario


class Idle:
    name = "idle"

    def react(self, world: World) -> bool:
        return False

    def next_wakeup(self, world: World) -> float | None:
        return None


def _world(replicas: int, template_spec: dict[str, Any]) -> tuple[World, PoolModel]:
    pool = PoolModel(
        name="ondemand", spot=False, zone="0", price=4.0, provision=parse_distribution(0, what="")
    )
    world = World(
        scenario=replace(scenario(), gpus_per_node=4),
        pools=[pool],
        deployments=[Deployment("llm", replicas, template_spec, 1)],
        start=0.0,
        horizon=3600.0,
        needed=replicas,
    )
    return world, pool


def test_a_scale_down_takes_a_replica_from_the_node_with_more_of_them() -> None:
    """Three replicas share one node, the fourth is alone and the last to become Ready: upstream
    ranks the crowded node's first (more of the owner's pods there) before the time Ready."""
    world, pool = _world(4, {})
    crowded, alone = world.add_node(pool), world.add_node(pool)
    for number, (node, ready_at) in enumerate(
        [(crowded, 10.0), (crowded, 10.0), (crowded, 10.0), (alone, 500.0)], start=1
    ):
        name = f"llm-{number}"
        world.pods[name] = Pod(name, f"uid-{number}", "llm", 0.0, node=node.name, ready_at=ready_at)
    world.now = 600.0
    world.deployments["llm"].replicas = 3

    world.settle(Idle())

    deleting = [pod for pod in world.pods.values() if pod.deleting]
    assert [pod.node for pod in deleting] == [crowded.name]


def test_a_required_node_affinity_term_without_requirements_matches_no_node() -> None:
    """Upstream's NodeAffinity: an empty term matches nothing, so the pod stays Pending and the
    autoscaler finds no pool for it (the controller's own reading took it for "any node")."""
    required = {"nodeSelectorTerms": [{}]}
    world, pool = _world(
        1,
        {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            }
        },
    )
    world.add_node(pool)
    world.now = 10.0

    world.settle(Idle())

    (pod,) = world.pods.values()
    assert pod.node is None
    assert len(world.nodes) == 1
