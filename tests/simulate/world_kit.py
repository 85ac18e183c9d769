"""A tiny virtual cluster for the simulator's action tests: one spot and one on-demand pool, one
Ready node in each, a Deployment `llm` with a pod on each node."""

from __future__ import annotations

from dataclasses import replace

from rebalancer.simulate.workload import Scenario, parse_distribution
from rebalancer.simulate.world import Deployment, Node, Pod, PoolModel, World

GRACE = 30  # the pods' own terminationGracePeriodSeconds (the scenario's)
# Longer than any grace: a deleted pod is gone exactly when its grace ends.
SHUTDOWN = 1000.0


def scenario() -> Scenario:
    return replace(
        Scenario(replicas=2),
        grace_seconds=GRACE,
        shutdown_seconds=parse_distribution(SHUTDOWN, what="test"),
    )


def small_world() -> World:
    provision = parse_distribution(0, what="test")
    spot = PoolModel(name="spot1", spot=True, zone="1", price=1.0, provision=provision)
    on_demand = PoolModel(name="ondemand", spot=False, zone="0", price=4.0, provision=provision)
    world = World(
        scenario=scenario(),
        pools=[spot, on_demand],
        deployments=[Deployment("llm", 2, {}, 1)],
        start=0.0,
        horizon=3600.0,
        needed=2,
    )
    for number, pool in enumerate((spot, on_demand), start=1):
        node = world.add_node(pool)
        world.pods[f"llm-{number}"] = Pod(
            f"llm-{number}", f"uid-{number}", "llm", 0.0, node=node.name, ready_at=0.0
        )
    world.now = 10.0
    return world


def spot_node(world: World) -> Node:
    return next(n for n in world.nodes.values() if n.pool.spot)


def spot_pod(world: World) -> Pod:
    node = spot_node(world)
    return next(p for p in world.pods.values() if p.node == node.name)
