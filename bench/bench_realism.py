"""One eviction scenario, handled by spot-rebalancer and by AKS node auto-drain alone, side by side.

    python -m bench.bench_realism --scenario gpu-wave        # 20 nodes, 8 s notices, 90 s loads
    python -m bench.bench_realism --scenario autodrain-pdb   # the demo's single Preempt

Two emulated clusters from the same shipped scenario run in this process; the controller runs as
a real process against the first (AKS's node-problem-detector is its signal: no agents), the
second has AKS's cordon-and-drain only. Both get the same Preempts at the same moments (the
scenario's `preempt` step: its count, notice and spread). Printed for each: the lowest Ready
count, the Ready deficit in replica-seconds, and missed deadlines (nodes that still ran a pod
that is not a DaemonSet's at NotBefore), next to what the scenario makes unavoidable
(`rebalancer_sim.measure`). Real time: a 90 s load takes 90 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.measure import ReadyDeficit, unavoidable_deficit
from rebalancer_sim.objects import condition_true
from rebalancer_sim.scenario import Scenario, load_scenario

LEASE = ("default", "spot-rebalancer-controller")


def _scenario(name: str, provisioning: float | None) -> tuple[Scenario, dict[str, Any]]:
    scenario = load_scenario(name)
    (wave,) = [s for s in scenario.timeline if s.action == "preempt"]
    scenario.timeline = []
    scenario.settings.node_delete_delay_seconds = 3
    scenario.settings.node_problem_detector_seconds = 1
    for pool in scenario.pools:
        if pool.priority == "regular" and pool.gpus and provisioning is not None:
            pool.provisioning_seconds = provisioning
    return scenario, wave.args


def _live(cluster: ClusterEmulator, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.pods(namespace)
        if p["metadata"]["name"].startswith(name) and not p["metadata"].get("deletionTimestamp")
    ]


def _ready(cluster: ClusterEmulator, namespace: str, name: str) -> int:
    return sum(1 for p in _live(cluster, namespace, name) if condition_true(p, "Ready"))


def _occupied(cluster: ClusterEmulator, node: str) -> bool:
    return any(
        not any(r.get("kind") == "DaemonSet" for r in p["metadata"].get("ownerReferences", []))
        for p in cluster.pods(node=node)
    )


def _spawn_controller(kubeconfig: Path, log_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "rebalancer.cli", "controller"],
        env={
            **os.environ,
            "REBALANCER_KUBECONFIG": str(kubeconfig),
            "REBALANCER_LOG_FORMAT": "json",
            "REBALANCER_NAMESPACE": LEASE[0],
            "REBALANCER_HTTP_HOST": "127.0.0.1",
            "REBALANCER_HTTP_PORT": "0",
            "REBALANCER_IDENTITY": "controller-0",
        },
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )


async def _run(name: str, provisioning: float | None) -> int:
    scenario, wave = _scenario(name, provisioning)
    (workload,) = [w for w in scenario.workloads if w.kind == "Deployment"]
    load = workload.startup_seconds
    assert isinstance(load, (int, float)), "one startupSeconds, not a range"
    namespace, deployment, replicas = workload.namespace, workload.name, workload.replicas
    spot_pool = str(wave["pool"])
    notice = float(wave.get("noticeSeconds", 30))
    count = int(wave.get("count", 1))
    spread = float(wave.get("spreadSeconds", 0))
    on_demand = next(p for p in scenario.pools if p.priority == "regular" and p.gpus)
    warm = on_demand.count >= count
    provision = 0.0 if warm else on_demand.provisioning_seconds
    workdir = Path(tempfile.mkdtemp(prefix="bench-realism-"))
    ours = ClusterEmulator(scenario)
    alone = ClusterEmulator(_scenario(name, provisioning)[0])
    urls = await ours.start(kubeconfig_dir=workdir)
    (workdir / "alone").mkdir()
    await alone.start(kubeconfig_dir=workdir / "alone")
    controller = _spawn_controller(urls.kubeconfig, workdir / "controller.log")
    try:
        await ours.wait_for(
            lambda: bool(
                ((ours.store.get(R.LEASES, *LEASE) or {}).get("spec") or {}).get("holderIdentity")
            ),
            timeout=30,
            message="the controller leading",
        )
        clusters = {"spot-rebalancer": ours, "auto-drain alone": alone}
        deficits = {key: ReadyDeficit(baseline=replicas) for key in clusters}
        deadlines: dict[str, dict[str, float]] = {key: {} for key in clusters}
        missed = {key: 0 for key in clusters}
        for cluster in clusters.values():
            cluster.cloud.pools[spot_pool].spot_capacity = 0  # a reclaim: no spot room
        nodes = {
            key: sorted(n["metadata"]["name"] for n in c.nodes(spot_pool))[:count]
            for key, c in clusters.items()
        }
        started = time.monotonic()
        for index in range(count):
            due = started + (spread * index / max(1, count - 1) if spread else 0.0)
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # the scenario's spread
            for key, cluster in clusters.items():
                event = cluster.preempt(nodes[key][index], notice_seconds=notice)
                deadlines[key][nodes[key][index]] = event.not_before.timestamp()
        end = time.monotonic() + spread + notice + provision + load + 60
        while time.monotonic() < end:
            now = time.monotonic()
            for key, cluster in clusters.items():
                deficits[key].sample(now, _ready(cluster, namespace, deployment))
                for node, deadline in list(deadlines[key].items()):
                    if time.time() >= deadline:
                        missed[key] += _occupied(cluster, node)
                        del deadlines[key][node]
            if not any(deadlines.values()) and all(
                _ready(c, namespace, deployment) == replicas for c in clusters.values()
            ):
                break
            if controller.poll() is not None:
                print(f"the controller exited; see {workdir}/controller.log")
                return 1
            await asyncio.sleep(0.05)
        unavoidable = unavoidable_deficit(
            notice_seconds=notice,
            load_seconds=float(load),
            provisioning_seconds=provision,
            doomed_replicas=count,
        )
        print(
            f"{name}: {count} Preempt(s), {notice:g} s notice, spread over {spread:g} s; "
            f"{replicas} replicas loading for {load:g} s; "
            + ("a warm on-demand node each" if warm else f"on-demand nodes in {provision:g} s")
        )
        print(f"  {'':<36}{'spot-rebalancer':>18}{'auto-drain alone':>19}")
        a, b = deficits["spot-rebalancer"], deficits["auto-drain alone"]
        print(f"  {'lowest Ready (of ' + str(replicas) + ')':<36}{a.lowest!s:>18}{b.lowest!s:>19}")
        print(
            f"  {'Ready deficit, replica-seconds':<36}"
            f"{a.replica_seconds:>18.0f}{b.replica_seconds:>19.0f}"
        )
        print(
            f"  {'missed deadlines (node not empty)':<36}"
            f"{missed['spot-rebalancer']:>18}{missed['auto-drain alone']:>19}"
        )
        # Every doomed replica is gone (NotBefore) before the first replacement can be Ready:
        # they are all missing at once.
        lowest = replicas - count if provision + float(load) > spread + notice else None
        print(
            f"  unavoidable: lowest Ready {lowest if lowest is not None else 'n/a'}, deficit "
            f"{unavoidable:.0f} replica-seconds, missed deadlines 0"
        )
        print(f"  logs: {workdir}")
        return 0
    finally:
        controller.send_signal(signal.SIGTERM)
        try:
            controller.wait(timeout=10)
        except subprocess.TimeoutExpired:
            controller.kill()
        await ours.stop()
        await alone.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="gpu-wave")
    parser.add_argument(
        "--provisioning-seconds",
        type=float,
        default=None,
        help="on-demand GPU nodes provision this fast (default: the scenario's)",
    )
    args = parser.parse_args()
    return asyncio.run(_run(args.scenario, args.provisioning_seconds))


if __name__ == "__main__":
    sys.exit(main())
