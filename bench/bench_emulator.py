"""Benchmark of the cluster emulator at fleet scale (prints figures; not a test).

Loads the `big-fleet` scenario (5 000 nodes, 50 000 pods; one spot pool cut to 200 nodes so a
whole pool can be evicted), then measures: RSS, time to list all pods as JSON over HTTP,
watch events per second delivered to 3 concurrent watchers, and the time to evict a 200-node
spot pool (Preempt with 0 s notice, 0 s node-delete delay) until every Node of the pool is gone
and every displaced pod has a bound replacement.

    .venv/bin/python bench/bench_emulator.py
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import resource
import time

import aiohttp

from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import load_scenario


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def watch_rate(cluster: ClusterEmulator, watchers: int, writes: int) -> tuple[float, int]:
    assert cluster.urls is not None
    since = str(cluster.store.resource_version)
    received = [0] * watchers
    ready = asyncio.Event()
    opened = 0

    async def watcher(index: int, session: aiohttp.ClientSession) -> None:
        nonlocal opened
        params = {"watch": "true", "resourceVersion": since, "timeoutSeconds": "120"}
        async with session.get(f"{cluster.urls.api}/api/v1/pods", params=params) as response:
            opened += 1
            if opened == watchers:
                ready.set()
            async for _line in response.content:
                received[index] += 1
                if received[index] >= writes:
                    return

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        tasks = [asyncio.create_task(watcher(i, session)) for i in range(watchers)]
        await asyncio.wait_for(ready.wait(), 30)
        pods = list(cluster.store.items(R.PODS))[:writes]
        start = time.perf_counter()
        for index, pod in enumerate(pods):
            updated = dict(pod)
            updated["metadata"] = dict(pod["metadata"])
            annotations = dict(pod["metadata"].get("annotations") or {})
            annotations["bench/touch"] = str(index)
            updated["metadata"]["annotations"] = annotations
            cluster.store.update(R.PODS, updated)
            if index % 500 == 0:
                await asyncio.sleep(0)  # let the watch handlers write while we produce
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return elapsed, sum(received)


async def main() -> None:
    scenario = load_scenario("big-fleet")
    evictable = scenario.pools[0]
    evictable.count = 200
    rest = copy.deepcopy(evictable)
    rest.name, rest.count = "spot4", 800
    scenario.pools.append(rest)
    scenario.settings.node_delete_delay_seconds = 0.0
    print(
        f"scenario: {sum(p.count for p in scenario.pools)} nodes, "
        f"{sum(w.replicas for w in scenario.workloads)} pods"
    )
    base = rss_mib()
    start = time.perf_counter()
    cluster = ClusterEmulator(scenario, history_size=20_000)
    load_seconds = time.perf_counter() - start
    gc.collect()
    ready = sum(1 for p in cluster.store.items(R.PODS) if p["status"].get("phase") == "Running")
    print(
        f"load (create + schedule + start every pod): {load_seconds:.1f} s; "
        f"{cluster.store.count(R.NODES)} nodes, {ready} running pods; "
        f"{cluster.store.writes} writes ({cluster.store.writes / load_seconds:,.0f}/s)"
    )
    print(f"RSS: {rss_mib():,.0f} MiB (interpreter and imports before loading: {base:,.0f} MiB)")
    urls = await cluster.start(run_loops=False)
    start = time.perf_counter()
    items, _, _ = cluster.store.list_raw(R.PODS)
    joined = b",".join(items)
    print(
        f"server side of that list (select, sort, join {len(joined) / 1e6:,.1f} MB): "
        f"{(time.perf_counter() - start) * 1000:,.0f} ms"
    )

    async with aiohttp.ClientSession() as session:
        for attempt in range(3):
            start = time.perf_counter()
            async with session.get(f"{urls.api}/api/v1/pods") as response:
                body = await response.read()
            fetched = time.perf_counter() - start
            items = len(json.loads(body)["items"]) if attempt == 0 else None
            print(
                f"list all pods over HTTP: {fetched * 1000:,.0f} ms, "
                f"{len(body) / 1e6:,.1f} MB" + (f", {items} items" if items else "")
            )

    writes = 20_000
    elapsed, delivered = await watch_rate(cluster, 3, writes)
    print(
        f"watch: {writes} pod updates to 3 watchers: {delivered:,} events in {elapsed:.2f} s "
        f"= {delivered / elapsed:,.0f} events/s delivered "
        f"({writes / elapsed:,.0f} writes/s incl. fan-out)"
    )

    victims = [n["metadata"]["name"] for n in cluster.nodes(evictable.name)]
    displaced = sum(len(cluster.store.pods_on_node(n)) for n in victims)
    start = time.perf_counter()
    for node in victims:
        cluster.preempt(node, notice_seconds=0)
    rounds = 0
    while True:
        cluster.step()
        rounds += 1
        gone = all(cluster.store.get(R.NODES, "", n) is None for n in victims)
        if gone and cluster.scheduler.pending_count() == 0:
            break
        await asyncio.sleep(0)
    evicted = time.perf_counter() - start
    print(
        f"evict a {len(victims)}-node spot pool ({displaced} pods displaced, replaced and "
        f"bound): {evicted:.2f} s in {rounds} control-loop rounds"
    )
    print(f"RSS at the end: {rss_mib():,.0f} MiB")
    await cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
