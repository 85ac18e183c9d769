"""The Grafana dashboards: generated from dashboards/build.py, and every query works on real data.

No Grafana server can be had here, so the dashboards are checked where they can go wrong:
- the committed JSON (both copies) is exactly what the generator writes;
- every metric they name exists in the processes' registries (rebalancer/metrics.py);
- a real Prometheus (1 s scrapes) scrapes the real agent and controller processes while the
  cluster emulator goes through evictions chosen so that every panel has something to show, and
  then every panel query must parse (a 400 otherwise) and return at least one value, as Grafana
  would ask for it over the run (a range query, or an instant query over `$__range`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from dashboards.build import DASHBOARDS, OUTPUT_DIRS, render
from tests.chart.conftest import Tools
from tests.chart.test_alerts import all_exported_names, metric_names_in
from tests.e2e.rig import SPOT_TOLERATIONS, Rig, running, scenario
from tests.helpers import free_port

pytestmark = pytest.mark.chart

DASHBOARD_FILES = {name: [d / f"{name}.json" for d in OUTPUT_DIRS] for name in DASHBOARDS}
# Panels that may legitimately show nothing after the scenario below, and why. Empty today: the
# scenario produces every panel's data, the failure panels included.
MAY_BE_EMPTY: dict[str, str] = {
    "Azure risk data age": "only with the Azure APIs enabled, which this run does not call",
    # Only for a workload with an availability target, which this run's have not (the gauges
    # are unit-tested from the target's record: tests/unit/test_target.py).
    "Error budget spent": "no availability target in this run",
    "All Ready": "no availability target in this run",
    "Replicas the targets keep": "no availability target in this run",
}


def load(name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(DASHBOARD_FILES[name][0].read_text())
    return board


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in panels(board):
        for target in panel["targets"]:
            yield panel, target


def annotations(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The Prometheus annotation queries (Grafana's built-in one has no expression)."""
    return [a for a in board["annotations"]["list"] if a.get("expr")]


# ---- generated, consistent, named from the code ----------------------------------------------


@pytest.mark.parametrize("name", DASHBOARDS)
def test_committed_json_is_what_the_generator_writes(name: str) -> None:
    for path in DASHBOARD_FILES[name]:
        assert path.read_text() == render(name), f"{path} is stale: run scripts/render-chart-files"


def test_no_dashboard_json_without_a_generator() -> None:
    for directory in OUTPUT_DIRS:
        assert {path.stem for path in directory.glob("*.json")} == set(DASHBOARDS)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_variables_and_data_source(name: str) -> None:
    board = load(name)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for key in ("cluster", "pool"):
        assert variables[key]["type"] == "query"
        assert variables[key]["includeAll"] and variables[key]["allValue"] == ".*"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel, target in targets(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert 'cluster=~"$cluster"' in target["expr"], panel["title"]
        assert panel.get("description"), panel["title"]
    for panel in panels(board):
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
    assert {a["name"] for a in annotations(board)} == {"Eviction notices", "Fail-overs blocked"}
    for annotation in annotations(board):
        assert annotation["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert 'cluster=~"$cluster"' in annotation["expr"], annotation["name"]
        assert annotation["enable"] and annotation["titleFormat"] and annotation["tagKeys"]


def test_each_dashboard_links_to_the_others_keeping_time_and_variables() -> None:
    uids = {name: load(name)["uid"] for name in DASHBOARDS}
    for name in DASHBOARDS:
        links = load(name)["links"]
        assert {link["url"] for link in links} == {
            f"/d/{uid}" for other, uid in uids.items() if other != name
        }
        for link in links:
            assert link["type"] == "link" and link["keepTime"] and link["includeVars"], link


def test_every_metric_named_exists_in_the_code() -> None:
    exported = all_exported_names()
    for name in DASHBOARDS:
        board = load(name)
        expressions = [target["expr"] for _, target in targets(board)]
        expressions += [annotation["expr"] for annotation in annotations(board)]
        expressions += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
        for expr in expressions:
            used = metric_names_in(expr)
            assert used, expr
            assert used <= exported, f"{name}: {used - exported} in {expr}"


# ---- a real Prometheus over a real run -------------------------------------------------------

# Two spot pools' worth of trouble. gpuspot (two nodes, 2 GPUs each) holds `llm`, which fails
# over to gpuondemand, and `pinned`, which cannot (its nodeSelector names the spot pool: a blocked
# fail-over, deleted at the deadline). cpuspot holds `cache`, whose PDB refuses every eviction
# until it is deleted at the deadline.
DATA = scenario(
    # eastus2: where the bundled price table has the A100 SKU, so the cost panels have prices.
    cluster={"name": "e2e", "region": "eastus2"},
    pools=[
        {"name": "system", "priority": "regular", "mode": "system", "vmSize": "Standard_D4s_v5",
         "zones": ["1"], "cpu": 4, "memory": "16Gi", "gpus": 0, "count": 1},
        {"name": "gpuspot", "priority": "spot", "vmSize": "Standard_NC48ads_A100_v4",
         "zones": ["1"], "cpu": 48, "memory": "440Gi", "gpus": 2, "count": 2},
        {"name": "cpuspot", "priority": "spot", "vmSize": "Standard_D8s_v5",
         "zones": ["2"], "cpu": 8, "memory": "32Gi", "gpus": 0, "count": 1},
        {"name": "gpuondemand", "priority": "regular", "vmSize": "Standard_NC48ads_A100_v4",
         "zones": ["1"], "cpu": 48, "memory": "440Gi", "gpus": 2, "count": 2},
    ],
    workloads=[
        {"name": "llm", "namespace": "inference", "replicas": 3,
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": SPOT_TOLERATIONS, "preferSpot": 100, "startupSeconds": 3,
         "pdb": {"maxUnavailable": 1}},
        {"name": "pinned", "namespace": "inference", "replicas": 1,
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": SPOT_TOLERATIONS,
         "nodeSelector": {"kubernetes.azure.com/agentpool": "gpuspot"}},
        {"name": "cache", "namespace": "cache", "kind": "StatefulSet", "replicas": 1,
         "requests": {"cpu": "1"}, "tolerations": SPOT_TOLERATIONS,
         "nodeSelector": {"kubernetes.azure.com/agentpool": "cpuspot"},
         "terminationGracePeriodSeconds": 30, "pdb": {"minAvailable": 1}},
    ],
)  # fmt: skip


def _failing_first_deployment_patch(cluster: Any) -> None:
    """One 500 on the first Deployment patch: a reconcile error the controller retries."""
    handle = cluster.api._handle  # wrapped before start(), which routes every request to it
    patches = itertools.count()

    async def once(request: web.Request) -> web.StreamResponse:
        if request.method == "PATCH" and "/deployments/" in request.path and next(patches) == 0:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "injected", "reason": "InternalError", "code": 500}  # fmt: skip
            return web.json_response(body, status=500)
        return await handle(request)

    cluster.api._handle = once


def start_prometheus(tools: Tools, workdir: Path, port: int) -> subprocess.Popen[bytes]:
    with (workdir / "prometheus.log").open("wb") as log:
        return subprocess.Popen(
            [
                tools.path("PROMETHEUS"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@contextlib.asynccontextmanager
async def prometheus(tools: Tools, workdir: Path, rig: Rig) -> AsyncIterator[str]:
    """A real Prometheus on 127.0.0.1 scraping every rig process each second."""
    jobs = {
        "spot-rebalancer-agent": [p for n, p in rig.ports.items() if n.startswith("agent")],
        "spot-rebalancer-controller": [p for n, p in rig.ports.items() if n.startswith("controller")],
    }  # fmt: skip
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{port}" for port in ports],
                        "labels": {"cluster": "e2e"},
                    }
                ],
            }
            for job, ports in jobs.items()
        ],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    process = start_prometheus(tools, workdir, port)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 20
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{url}/-/ready") as response:
                        if response.status == 200:
                            break
                assert process.poll() is None, (workdir / "prometheus.log").read_text()
                assert time.monotonic() < deadline, "prometheus did not become ready"
                await asyncio.sleep(0.2)
            # Ready is not scraping: service discovery hands targets over at most every 5 s.
            # Every series must have samples from before the first notice, or the jump in a
            # counter or histogram that the notice causes is not there for rate() to see.
            targets = sum(len(ports) for ports in jobs.values())
            while True:
                async with session.get(
                    f"{url}/api/v1/query", params={"query": "count(up == 1)"}
                ) as response:
                    result = (await response.json())["data"]["result"]
                if result and int(result[0]["value"][1]) == targets:
                    break
                assert time.monotonic() < deadline, "prometheus did not scrape every target"
                await asyncio.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def run_evictions(rig: Rig) -> None:
    """The scenario: every panel of the dashboard gets data from it."""
    early, on_time = sorted(n["metadata"]["name"] for n in rig.cluster.nodes("gpuspot"))
    (cache_node,) = [n["metadata"]["name"] for n in rig.cluster.nodes("cpuspot")]
    # An agent error: its IMDS answers 400 twice.
    rig.cluster.imds.add_fault(rig.cluster.vm_name_for(on_time), "status", status=400, count=2)
    for node in (early, on_time):
        rig.cluster.preempt(node, notice_seconds=12)
    rig.cluster.preempt(cache_node, notice_seconds=15)  # its PDB blocks evictions until then
    await rig.wait_for(
        lambda: rig.deployment()["spec"]["replicas"] > 3, timeout=10, what="the llm surge"
    )
    # Azure takes one VM before its NotBefore, while the replacements still load: its replicas
    # are lost early (a replica deficit) and the node goes before it was drained.
    rig.cluster.cloud.take_away(early)
    await rig.wait_for(
        lambda: all(rig.node(n) is None for n in (early, on_time, cache_node)),
        timeout=30,
        what="the spot VMs gone",
    )
    # At least: what this test needs is data in every panel, not the exact replica count (the
    # controller's e2e tests assert that).
    await rig.wait_for(lambda: rig.ready_count() >= 3, timeout=15, what="llm Ready again")
    for sample in (
        'rebalancer_controller_pods_total{action="eviction_blocked"}',
        'rebalancer_controller_pods_total{action="deleted"}',
        "rebalancer_controller_drain_missed_deadline_total",
        "rebalancer_controller_notice_to_replacement_ready_seconds_count",
        'rebalancer_controller_failovers_total{reason="NoCompatibleOnDemandPool",stage="blocked"}',
        "rebalancer_controller_replica_deficit_replica_seconds_total",
    ):
        await rig.wait_for_metric("controller-0", sample, 0.0001, timeout=10)
    await rig.wait_for_metric(
        f"agent-{on_time}", 'rebalancer_agent_errors_total{kind="imds"}', 1, timeout=10
    )


async def scrapes(url: str, count: int) -> None:
    """Return once Prometheus has scraped every target `count` more times: `up` gets one sample
    per scrape, so its count over the run counts them (a sleep only guessed, and a loaded machine
    scrapes late)."""

    async with aiohttp.ClientSession() as session:

        async def done() -> dict[tuple[str, str], int]:
            params = {"query": "count_over_time(up[1h])"}
            async with session.get(f"{url}/api/v1/query", params=params) as response:
                result = (await response.json())["data"]["result"]
            return {
                (series["metric"]["job"], series["metric"]["instance"]): int(series["value"][1])
                for series in result
            }

        before = await done()
        assert before, "prometheus has no targets"
        deadline = time.monotonic() + 30
        while True:
            now = await done()
            if all(now.get(target, 0) >= n + count for target, n in before.items()):
                return
            assert time.monotonic() < deadline, f"prometheus did not scrape {count} more times"
            await asyncio.sleep(0.2)


def as_grafana_would(expr: str, *, range_seconds: int) -> str:
    """Grafana's template variables as it fills them: All for cluster and pool, 1 s scrapes."""
    return (
        expr.replace("$cluster", ".*")
        .replace("$pool", ".*")
        .replace("$__rate_interval", "5s")
        .replace("$__range", f"{range_seconds}s")
    )


def has_value(result: dict[str, Any]) -> bool:
    data = result["data"]
    values: list[Any] = []
    if data["resultType"] == "matrix":
        values = [v for series in data["result"] for _, v in series["values"]]
    elif data["resultType"] == "vector":
        values = [series["value"][1] for series in data["result"]]
    return any(not math.isnan(float(v)) for v in values)


async def test_every_panel_query_returns_data_from_a_real_run(tools: Tools, tmp_path: Path) -> None:
    started = time.time()
    async with running(tmp_path, DATA, prepare=_failing_first_deployment_patch) as rig:
        rig.start_agents("gpuspot")
        rig.start_agents("cpuspot")
        rig.start_controller(REBALANCER_COST_INTERVAL_SECONDS="1")  # cost panels: every second
        await rig.until_ready()
        async with prometheus(tools, tmp_path, rig) as url:
            await scrapes(url, 2)  # a baseline before the first notice
            await run_evictions(rig)
            await scrapes(url, 3)  # a few more, so every rate window has two samples
            end = time.time()
            span = int(end - started) + 1
            empty: list[str] = []
            async with aiohttp.ClientSession() as session:
                for name in DASHBOARDS:
                    board = load(name)
                    for variable in board["templating"]["list"]:
                        if variable["type"] != "query":
                            continue
                        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
                        assert match, variable["query"]
                        selector = as_grafana_would(match[1], range_seconds=span)
                        async with session.get(
                            f"{url}/api/v1/label/{match[2]}/values", params={"match[]": selector}
                        ) as response:
                            values = (await response.json())["data"]
                        assert values, f"variable {variable['name']} has no values"
                    for panel, target in targets(board):
                        expr = as_grafana_would(target["expr"], range_seconds=span)
                        if target.get("instant"):
                            endpoint, params = "query", {"query": expr, "time": str(end)}
                        else:
                            endpoint = "query_range"
                            params = {"query": expr, "start": str(started), "end": str(end),
                                      "step": "1"}  # fmt: skip
                        async with session.get(
                            f"{url}/api/v1/{endpoint}", params=params
                        ) as response:
                            body = await response.json()
                            assert response.status == 200, f"{panel['title']}: {expr}: {body}"
                        if not has_value(body):
                            empty.append(f"{panel['title']} [{target['refId']}]: {expr}")
                    for annotation in annotations(board):  # a range query, as Grafana asks
                        expr = as_grafana_would(annotation["expr"], range_seconds=span)
                        params = {"query": expr, "start": str(started), "end": str(end),
                                  "step": "1"}  # fmt: skip
                        async with session.get(
                            f"{url}/api/v1/query_range", params=params
                        ) as response:
                            body = await response.json()
                            assert response.status == 200, f"{annotation['name']}: {body}"
                        if not has_value(body):
                            empty.append(f"annotation {annotation['name']}: {expr}")
    elapsed = time.time() - started
    unexpected = [line for line in empty if line.split(" [")[0] not in MAY_BE_EMPTY]
    assert not unexpected, "panels without data:\n" + "\n".join(unexpected)
    assert elapsed < 90, f"the dashboard run took {elapsed:.0f}s"
