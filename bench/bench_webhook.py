"""The admission webhook's cost: latency of one Pod review at a steady 200 creations per second.

The real `PlacementWebhook` serves over real HTTPS (a certificate from its own issuer) on
127.0.0.1; the client keeps its connections open as the API server does, and sends one
AdmissionReview every 5 ms for `--seconds`. The view is a cluster of `--nodes` nodes (three spot
pools in three zones and an on-demand pool) running `--workloads` Deployments with a placement
policy, 10 replicas each; every review is for a pod of one of them, so each one is a placement.

    .venv/bin/python -m bench.bench_webhook [--seconds 30] [--nodes 1000] [--workloads 100]

Goal (issue "The scheduler"): p99 under 10 ms at 200 pods/s (the API server's default webhook
timeout is 10 s; the chart gives it 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import ssl
import statistics
import time
from typing import Any

import aiohttp
import structlog

from rebalancer import names
from rebalancer.controller.admission import View
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.webhook import PATH, PlacementWebhook, serve
from rebalancer.controller.webhook_tls import issue, server_context, service_names
from rebalancer.metrics import ControllerMetrics

NOW = dt.datetime.now(dt.UTC)
SPOT_TAINT = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "value": "spot",
    "effect": "NoSchedule",
}
TOLERATIONS = [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Exists"}]
GPU = {"limits": {"nvidia.com/gpu": "1"}}


def node(name: str, pool: str, zone: str, spot: bool) -> NodeInfo:
    return NodeInfo.from_json(
        {
            "metadata": {
                "name": name,
                "labels": {
                    names.AKS_AGENTPOOL_LABEL: pool,
                    names.ZONE_LABEL: zone,
                    names.AKS_SPOT_LABEL: "spot" if spot else "regular",
                    names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
                },
            },
            "spec": {"taints": [SPOT_TAINT] if spot else []},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"nvidia.com/gpu": "1"},
            },
        }
    )


def world(nodes: int, workloads: int) -> View:
    infos = []
    for index in range(nodes):
        if index % 10 == 0:
            infos.append(node(f"od-{index}", "gpuondemand", "eastus-1", False))
        else:
            pool = f"gpuspot{index % 3}"
            infos.append(node(f"{pool}-{index}", pool, f"eastus-{index % 3 + 1}", True))
    pods, deployments, owners = {}, {}, {}
    for w in range(workloads):
        name = f"model{w:03d}"
        deployments[("Deployment", "inference", name)] = WorkloadInfo.from_json(
            "Deployment",
            {
                "metadata": {
                    "namespace": "inference", "name": name,
                    "annotations": {names.MIN_ON_DEMAND: "1", names.MAX_RISK: "high"},
                },
                "spec": {
                    "replicas": 10, "selector": {"matchLabels": {"app": name}},
                    "template": {"spec": {"tolerations": TOLERATIONS,
                                          "containers": [{"name": "c", "resources": GPU}]}},
                },
            },
        )  # fmt: skip
        owners[("inference", f"{name}-rs")] = name
        for r in range(10):
            host = infos[(w * 10 + r) % len(infos)]
            pods[("inference", f"{name}-{r}")] = PodInfo.from_json(
                {
                    "metadata": {
                        "namespace": "inference", "name": f"{name}-{r}",
                        "ownerReferences": [
                            {"kind": "ReplicaSet", "name": f"{name}-rs", "controller": True}
                        ],
                    },
                    "spec": {"nodeName": host.name, "containers": [{"name": "c", "resources": GPU}]},
                    "status": {"phase": "Running"},
                }
            )  # fmt: skip
    snapshot = Snapshot(
        now=NOW,
        nodes={n.name: n for n in infos},
        pods=pods,
        workloads=deployments,
        replicaset_owners=owners,
    )
    risks = assess(nodes=infos, history=snapshot.history, now=NOW, settings=RiskSettings())
    return View(snapshot, risks)


def review(uid: int, workload: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"u{uid}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "inference",
            "object": {
                "metadata": {
                    "generateName": f"{workload}-rs-",
                    "namespace": "inference",
                    "labels": {"app": workload, "spot-rebalancer.io/placement": "enabled"},
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": f"{workload}-rs", "controller": True}
                    ],
                },
                "spec": {
                    "tolerations": TOLERATIONS,
                    "containers": [{"name": "c", "image": "vllm", "resources": GPU}],
                },
            },
        },
    }


async def run(seconds: float, nodes: int, workloads: int, rate: float) -> None:
    view = world(nodes, workloads)
    metrics = ControllerMetrics()
    hook = PlacementWebhook(
        lambda: view, metrics=metrics, now=lambda: dt.datetime.now(dt.UTC),
        log=structlog.get_logger(),
    )  # fmt: skip
    host = service_names("bench", "bench")[2]
    material = issue(service_names("bench", "bench"), dt.datetime.now(dt.UTC))
    runner = await serve(hook, "127.0.0.1", 0, server_context(material))
    port = runner.addresses[0][1]
    trust = ssl.create_default_context(cadata=material.ca.decode())
    latencies: list[float] = []
    placed = 0
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int) -> None:
            nonlocal placed
            body = review(index, f"model{index % workloads:03d}")
            started = time.perf_counter()
            async with session.post(
                f"https://127.0.0.1:{port}{PATH}", json=body, ssl=trust, server_hostname=host
            ) as response:
                answer = await response.json()
            latencies.append(time.perf_counter() - started)
            if answer["response"].get("patch"):
                base64.b64decode(answer["response"]["patch"])
                placed += 1

        await one(0)  # the TLS handshake, once
        latencies.clear()
        placed = 0
        tasks = []
        interval = 1.0 / rate
        start = time.perf_counter()
        index = 1
        while time.perf_counter() - start < seconds:
            tasks.append(asyncio.create_task(one(index)))
            index += 1
            await asyncio.sleep(max(0.0, start + index * interval - time.perf_counter()))
        await asyncio.gather(*tasks)
    await runner.cleanup()
    sent = len(latencies)
    quantiles = statistics.quantiles(latencies, n=100)
    served = next(
        s for s in metrics.registry.collect() if s.name == "rebalancer_webhook_review_seconds"
    )
    buckets = {s.labels["le"]: s.value for s in served.samples if s.name.endswith("_bucket")}
    print(f"cluster: {nodes} nodes, {workloads} Deployments with a policy, {workloads * 10} pods")
    print(f"reviews: {sent} in {seconds:.0f} s ({sent / seconds:.0f}/s), placed {placed}")
    print(
        f"round trip over HTTPS (keep-alive): p50 {quantiles[49] * 1000:.2f} ms, "
        f"p99 {quantiles[98] * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms"
    )
    total = buckets["+Inf"]
    within = {le: n / total for le, n in buckets.items() if le in ("0.001", "0.005", "0.01")}
    print(
        "answered in the server within: "
        + ", ".join(f"{float(le) * 1000:g} ms {share:.1%}" for le, share in within.items())
    )
    goal = quantiles[98] < 0.010
    print(f"goal p99 < 10 ms at {rate:.0f}/s: {'met' if goal else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=100)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args()
    asyncio.run(run(args.seconds, args.nodes, args.workloads, args.rate))


if __name__ == "__main__":
    main()
