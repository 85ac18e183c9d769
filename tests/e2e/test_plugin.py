"""`kubectl spot-rebalancer status | doctor` through the real kubectl, against the cluster
emulator running shipped scenarios.

- `spot-gpu-misconfigured`: the device plugin and our agent without the spot toleration, an
  embedder that cannot use spot. The doctor names the three (exit 1); the commands and YAML it
  prints, run as printed with kubectl, leave a healthy cluster (exit 0, no finding): the spot
  nodes advertise their GPUs and run the agent.
- `aks-gpu-small`: an on-demand GPU pool autoscaled at zero and not declared. The chart's own
  controller Deployment (`helm template`, with `controller.pools` and `controller.prices` from
  the scenario) makes it declared and priced: the doctor is satisfied and the status shows it.

Every expected value comes from the scenario (its pools, workloads and prices) and from the
emulator's own placement (its scheduling code, not the controller's), never from the plugin.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources as package_resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import GPU, Scenario, WorkloadSpec, parse_scenario
from rebalancer_sim.scheduling import untolerated_taint
from tests.chart.generated import CHART, helm_environment
from tests.e2e.rig import ready
from tests.helpers import KUBECTL, wait_for

pytestmark = pytest.mark.e2e

AGENT_LABELS = {
    "app.kubernetes.io/part-of": "spot-rebalancer",
    "app.kubernetes.io/component": "agent",
}
POOL_LABEL = "kubernetes.azure.com/agentpool"


def shipped(name: str) -> dict[str, Any]:
    """A shipped scenario with the e2e tier's fast timings (nodes in 1 s, models in 0.3 s)."""
    text = (package_resources.files("rebalancer_sim") / "scenarios" / f"{name}.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    data["timeline"] = []
    for pool in data["pools"]:
        pool["provisioningSeconds"] = 1
    for workload in data["workloads"]:
        workload.update(startupSeconds=0.3, shutdownSeconds=0.2)
    return data


def price_file(scenario: Scenario) -> str:
    """The scenario's prices in the controller's price-file format (one row per VM size)."""
    rows: dict[str, dict[str, Any]] = {}
    for pool in scenario.pools:
        row = rows.setdefault(
            pool.vm_size, {"sku": pool.vm_size, "region": scenario.cluster.region}
        )
        row["onDemand"] = pool.price_per_hour
        if pool.spot_price_per_hour is not None:
            row["spot"] = pool.spot_price_per_hour
    return yaml.safe_dump({"prices": list(rows.values())})


def gpu_workloads(scenario: Scenario) -> list[WorkloadSpec]:
    return [w for w in scenario.workloads if w.kind != "DaemonSet" and GPU in w.requests]


def blocked_by_spot(scenario: Scenario, tolerations: list[dict[str, Any]]) -> bool:
    """Whether these tolerations keep a pod off the scenario's spot pool (emulator's matcher)."""
    (spot,) = [p for p in scenario.pools if p.is_spot]
    hard = [t for t in spot.all_taints() if t["effect"] in ("NoSchedule", "NoExecute")]
    return untolerated_taint(tolerations, hard) is not None


@asynccontextmanager
async def emulated(data: dict[str, Any], workdir: Path) -> AsyncIterator[ClusterEmulator]:
    cluster = ClusterEmulator(parse_scenario(data), tick_seconds=0.05)
    await cluster.start(kubeconfig_dir=workdir)
    try:
        yield cluster
    finally:
        await cluster.stop()


async def run(cluster: ClusterEmulator, *args: str, stdin: str = "") -> tuple[int, str, str]:
    """The real kubectl (plugins found on PATH, this interpreter's scripts first)."""
    env = dict(
        os.environ,
        KUBECONFIG=str(cluster.kubeconfig_path),
        HOME="/tmp",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    process = await asyncio.create_subprocess_exec(
        KUBECTL, *args, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def plugin(cluster: ClusterEmulator, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = await run(cluster, "spot-rebalancer", *args, "-o", "json")
    assert code in (0, 1), err
    return code, json.loads(out)


def findings(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (f["id"], f"{f['object']['kind']} "
                  f"{f['object']['namespace'] + '/' if f['object']['namespace'] else ''}"
                  f"{f['object']['name']}")
        for f in document["findings"]
    }  # fmt: skip


def placement(cluster: ClusterEmulator, namespace: str = "inference") -> dict[str, dict[str, int]]:
    """Replicas per workload and pool, as the emulator placed them."""
    pools = {n["metadata"]["name"]: n["metadata"]["labels"][POOL_LABEL] for n in cluster.nodes()}
    placed: dict[str, dict[str, int]] = {}
    for pod in cluster.pods(namespace):
        if pod["metadata"].get("deletionTimestamp"):
            continue  # leaving: the status counts it out too
        workload = pod["metadata"]["name"].rsplit("-", 2)[0]
        pool = pools.get(pod["spec"].get("nodeName", ""))
        if pool is None:
            continue  # pending: the status counts it apart
        placed.setdefault(workload, {}).setdefault(pool, 0)
        placed[workload][pool] += 1
    return placed


def spend(cluster: ClusterEmulator, scenario: Scenario) -> dict[str, float]:
    """$/hour of the nodes that exist, at the scenario's prices."""
    by_pool = {pool.name: pool for pool in scenario.pools}
    rates = {"spot": 0.0, "onDemand": 0.0}
    for node in cluster.nodes():
        pool = by_pool[node["metadata"]["labels"][POOL_LABEL]]
        if pool.is_spot:
            rates["spot"] += pool.spot_price_per_hour or 0.0
        else:
            rates["onDemand"] += pool.price_per_hour
    return rates


async def test_doctor_finds_what_is_wrong_and_its_fixes_work(tmp_path: Path) -> None:
    data = shipped("spot-gpu-misconfigured")
    scenario = parse_scenario(data)
    prices = tmp_path / "prices.yaml"
    prices.write_text(price_file(scenario))
    (spot,) = [p for p in scenario.pools if p.is_spot]
    (on_demand,) = [p for p in scenario.pools if not p.is_spot and p.gpus]
    gpu_replicas = sum(w.replicas * int(w.requests[GPU]) for w in gpu_workloads(scenario))
    async with emulated(data, tmp_path) as cluster:
        # The device plugin cannot run on spot, so every GPU replica waits for on-demand nodes.
        await cluster.wait_for(
            lambda: sum(1 for p in cluster.pods("inference") if ready(p)) == gpu_replicas,
            timeout=20,
        )
        code, doc = await plugin(cluster, "doctor")
        plugins = [w for w in scenario.workloads if w.device_plugin]
        agents = [w for w in scenario.workloads if AGENT_LABELS.items() <= w.labels.items()]
        expected = {
            *(("device-plugin-not-on-spot", f"DaemonSet {w.namespace}/{w.name}")
              for w in plugins if blocked_by_spot(scenario, w.tolerations)),
            *(("agent-not-on-spot", f"DaemonSet {w.namespace}/{w.name}")
              for w in agents if blocked_by_spot(scenario, w.tolerations)),
            *(("workload-cannot-use-spot", f"Deployment {w.namespace}/{w.name}")
              for w in gpu_workloads(scenario) if blocked_by_spot(scenario, w.tolerations)),
        }  # fmt: skip
        assert len(expected) == 3  # the scenario's three mistakes
        assert (code, findings(doc)) == (1, expected)

        code, status = await plugin(cluster, "status", "--prices", str(prices))
        pools = {p["name"]: p for p in status["pools"]}
        assert pools[spot.name]["nodes"] == spot.count
        assert pools[spot.name]["gpusPerNode"] == 0  # advertised by nobody
        assert pools[on_demand.name]["nodes"] == -(-gpu_replicas // on_demand.gpus)
        assert pools[on_demand.name]["gpusPerNode"] == on_demand.gpus
        assert {w["name"]: {pool: c["replicas"] for pool, c in w["pools"].items()}
                for w in status["workloads"]} == placement(cluster)  # fmt: skip
        assert all(set(c) == {on_demand.name} for c in placement(cluster).values())
        assert status["cost"]["fallbackReplicas"] == 0  # no spot pool with GPUs could take them
        rates = spend(cluster, scenario)
        assert status["cost"]["spendPerHour"]["spot"] == pytest.approx(rates["spot"], abs=1e-3)
        assert status["cost"]["spendPerHour"]["onDemand"] == pytest.approx(
            rates["onDemand"], abs=1e-3
        )
        assert status["cost"]["savingsPerHour"] == pytest.approx(
            spot.count * (spot.price_per_hour - (spot.spot_price_per_hour or 0)), abs=1e-3
        )
        assert status["risk"]["sources"] == ["prior"]  # no eviction history: no controller ran
        assert status["install"]["agent"] == {"name": agents[0].name, "desired": 0, "ready": 0}

        # Every fix, as printed: the YAML in a file, the command with kubectl.
        for finding in doc["findings"]:
            (tmp_path / "fix.yaml").write_text(finding["yaml"])
            command = shlex.split(
                finding["command"].replace("fix.yaml", str(tmp_path / "fix.yaml"))
            )
            assert command[0] == "kubectl", command
            code, out, err = await run(cluster, *command[1:])
            assert code == 0, err

        spot_nodes = [
            n for n in cluster.nodes() if n["metadata"]["labels"][POOL_LABEL] == spot.name
        ]
        await wait_for(
            lambda: all(
                n["status"]["allocatable"].get(GPU) == str(spot.gpus)
                for n in cluster.nodes(spot.name)
            ),
            timeout=10,
            what="the spot nodes' GPUs advertised",
        )
        code, doc = await plugin(cluster, "doctor")
        assert (code, doc["findings"]) == (0, [])
        await cluster.wait_for(  # the embedder's rollout over
            lambda: (
                sum(1 for p in cluster.pods("inference") if ready(p)) == gpu_replicas
                and not any(
                    p["metadata"].get("deletionTimestamp") for p in cluster.pods("inference")
                )
            ),
            timeout=10,
        )
        code, status = await plugin(cluster, "status", "--prices", str(prices))
        pools = {p["name"]: p for p in status["pools"]}
        assert pools[spot.name]["gpusPerNode"] == spot.gpus
        assert status["install"]["agent"]["desired"] == len(spot_nodes)
        placed = placement(cluster)
        assert {w["name"]: {pool: c["replicas"] for pool, c in w["pools"].items()}
                for w in status["workloads"]} == placed  # fmt: skip
        # Now a spot pool fits every GPU workload: whatever runs on on-demand is a fallback.
        assert status["cost"]["fallbackReplicas"] == sum(
            count for pools_of in placed.values() for pool, count in pools_of.items()
            if pool == on_demand.name
        )  # fmt: skip
        code, out, _ = await run(cluster, "spot-rebalancer", "status")
        assert code == 0 and f"{spot.name}" in out and "SPEND" in out


async def test_a_pool_at_zero_is_declared_through_the_chart(tmp_path: Path) -> None:
    data = shipped("aks-gpu-small")
    scenario = parse_scenario(data)
    (zero,) = [p for p in scenario.pools if not p.is_spot and p.gpus and p.count == 0]
    (spot,) = [p for p in scenario.pools if p.is_spot]
    (inference,) = gpu_workloads(scenario)
    async with emulated(data, tmp_path) as cluster:
        await cluster.wait_for(
            lambda: sum(1 for p in cluster.pods("inference") if ready(p)) == inference.replicas,
            timeout=10,
        )
        code, doc = await plugin(cluster, "doctor")
        assert (code, findings(doc)) == (1, {
            ("workload-no-on-demand-fallback", f"Deployment {inference.namespace}/{inference.name}"),
            ("on-demand-pool-undeclared", f"NodePool {zero.name}"),
        })  # fmt: skip

        # The chart, as the README installs it, with the pool declared and the scenario's prices.
        declared = [
            {
                "name": zero.name,
                "gpus": zero.gpus,
                "taints": [
                    f"{t['key']}={t['value']}:{t['effect']}"
                    if t.get("value")
                    else f"{t['key']}:{t['effect']}"
                    for t in zero.all_taints()
                ],
            }
        ]
        prices = yaml.safe_load(price_file(scenario))["prices"]  # fmt: skip
        values = tmp_path / "values.yaml"
        values.write_text(yaml.safe_dump({"controller": {"pools": declared, "prices": prices}}))
        env = helm_environment()
        helm = await asyncio.create_subprocess_exec(
            env["HELM4"], "template", "spot-rebalancer", str(CHART), "-n", "spot-rebalancer",
            "-f", str(CHART / "values-aks-spot.yaml"), "-f", str(values),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        rendered, err = await helm.communicate()
        assert helm.returncode == 0, err.decode()
        wanted = {("Deployment", "controller"), ("DaemonSet", "agent"), ("ConfigMap", "controller")}
        objects = [
            o for o in yaml.safe_load_all(rendered)
            if o and (o["kind"], o["metadata"]["labels"].get("app.kubernetes.io/component"))
            in wanted
        ]  # fmt: skip
        namespace = {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "spot-rebalancer"}}  # fmt: skip
        manifest = yaml.safe_dump_all([namespace, *objects])
        code, _, err = await run(cluster, "apply", "-f", "-", stdin=manifest)
        assert code == 0, err

        code, doc = await plugin(cluster, "doctor")
        assert (code, doc["findings"]) == (0, [])
        code, status = await plugin(cluster, "status")
        assert status["install"]["controller"]["name"] == "spot-rebalancer-controller"
        assert status["install"]["settings"] == (
            "Deployment spot-rebalancer/spot-rebalancer-controller"
        )
        pools = {p["name"]: p for p in status["pools"]}
        assert pools[zero.name]["declared"] and pools[zero.name]["nodes"] == 0
        assert pools[zero.name]["taints"] == declared[0]["taints"]
        assert status["cost"]["prices"] == "file+bundled"  # the chart's ConfigMap was read
        assert status["cost"]["spendPerHour"]["spot"] == pytest.approx(
            spot.count * (spot.spot_price_per_hour or 0), abs=1e-3
        )
        assert {w["name"]: {pool: c["replicas"] for pool, c in w["pools"].items()}
                for w in status["workloads"]} == placement(cluster)  # fmt: skip
        assert status["problems"] == []


async def test_what_the_cluster_wrote_is_shown_not_obeyed(tmp_path: Path) -> None:
    """A Lease holder with a title change and a screen clear in it (anyone who may write the
    Lease can set it): `status` shows them as text, `-o json` gives them back exactly."""
    holder = "spot-rebalancer-controller-0\x1b]0;owned\x07\x1b[2J\x9b2J\x7f\r\n- forged"
    lease = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "spot-rebalancer-controller", "namespace": "spot-rebalancer"},
        "spec": {"holderIdentity": holder, "renewTime": "2026-03-01T12:00:00.000000Z"},
    }  # fmt: skip
    async with emulated(shipped("aks-gpu-small"), tmp_path) as cluster:
        namespace = {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "spot-rebalancer"}}  # fmt: skip
        manifest = yaml.safe_dump_all([namespace, lease])  # YAML escapes the controls
        code, _, err = await run(cluster, "apply", "-f", "-", stdin=manifest)
        assert code == 0, err
        code, out, err = await run(cluster, "spot-rebalancer", "status")
        assert code == 0, err
        assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in out)
        assert (
            "leader spot-rebalancer-controller-0\\x1b]0;owned\\x07\\x1b[2J\\x9b2J\\x7f\\x0d\\x0a"
            "- forged" in out
        )
        code, status = await plugin(cluster, "status")
        assert status["install"]["leader"]["identity"] == holder


def without_time(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "time"}


async def test_output_formats_through_kubectl(tmp_path: Path) -> None:
    """`-o yaml` is the `-o json` document; `-o wide` adds the pools' zones, VM sizes and taints
    (the scenario's); `--no-headers` drops the heading rows."""
    data = shipped("aks-gpu-small")
    scenario = parse_scenario(data)
    async with emulated(data, tmp_path) as cluster:
        _, as_json = await plugin(cluster, "status")
        code, out, err = await run(cluster, "spot-rebalancer", "status", "-o", "yaml")
        assert code == 0, err
        assert without_time(yaml.safe_load(out)) == without_time(as_json)

        code, wide, err = await run(cluster, "spot-rebalancer", "status", "-o", "wide")
        assert code == 0, err
        heading = next(line for line in wide.splitlines() if line.startswith("POOL "))
        assert heading.split()[-4:] == ["ZONES", "VM", "SIZES", "TAINTS"]
        rows = {line.split()[0]: line for line in wide.splitlines()[wide.splitlines().index(heading) + 1 :] if line}  # fmt: skip
        for pool in scenario.pools:
            if pool.count:
                assert rows[pool.name].split()[-2] == pool.vm_size, rows[pool.name]
                zones = {f"{scenario.cluster.region}-{zone}" for zone in pool.zones}
                assert set(rows[pool.name].split()[-3].split(",")) <= zones, rows[pool.name]

        code, bare, err = await run(cluster, "spot-rebalancer", "--no-headers", "status")
        assert code == 0, err
        code, full, err = await run(cluster, "spot-rebalancer", "status")
        assert not any(line.startswith(("POOL ", "WORKLOAD ")) for line in bare.splitlines())
        assert any(line.startswith("POOL ") for line in full.splitlines())


async def test_watch_prints_a_change_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """`--watch`: a document at once, another when a managed workload is scaled in the
    emulator, one read (one list of each kind) per interval, exit 0 on SIGINT."""
    data = shipped("aks-gpu-small")
    (inference,) = gpu_workloads(parse_scenario(data))
    interval = 0.5
    async with emulated(data, tmp_path) as cluster:
        await cluster.wait_for(
            lambda: sum(1 for p in cluster.pods("inference") if ready(p)) == inference.replicas,
            timeout=10,
        )
        env = dict(
            os.environ,
            KUBECONFIG=str(cluster.kubeconfig_path),
            HOME="/tmp",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        before = cluster.api.requests
        process = await asyncio.create_subprocess_exec(
            KUBECTL, "spot-rebalancer", "status", "-w", "--watch-interval", str(interval),
            "-o", "json", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        decoder, buffer = json.JSONDecoder(), ""

        async def next_document() -> dict[str, Any]:
            nonlocal buffer
            while True:
                text = buffer.lstrip()
                try:
                    document, end = decoder.raw_decode(text)
                except ValueError:
                    chunk = await asyncio.wait_for(process.stdout.read(65536), 30)
                    assert chunk, (await process.stderr.read()).decode()
                    buffer += chunk.decode()
                    continue
                buffer = text[end:]
                return dict(document)

        try:
            first = await next_document()
            first_at, per_read = time.monotonic(), cluster.api.requests - before
            replicas = {w["name"]: w["replicas"] for w in first["workloads"]}
            assert replicas == {inference.name: inference.replicas}
            cluster.scale(inference.name, inference.replicas + 1, namespace=inference.namespace)
            second = await next_document()
            assert {w["name"]: w["replicas"] for w in second["workloads"]} == {
                inference.name: inference.replicas + 1
            }
            reads = (time.monotonic() - first_at) / interval + 2  # the reads that could fit
            assert cluster.api.requests - before - per_read <= reads * per_read
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 30)
        err = (await process.stderr.read()).decode()
        assert process.returncode == 0, err
        assert "Traceback" not in err
