"""The kubectl plugin's pure parts: where spot-rebalancer is and with which settings, the status
document from one view, its text, and the command line."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from rebalancer import names
from rebalancer.clock import ManualClock
from rebalancer.controller.history import Entry, History
from rebalancer.controller.records import Surge
from rebalancer.plugin import doctor, status
from rebalancer.plugin import main as plugin_main
from rebalancer.plugin.gather import ReadFailed
from rebalancer.plugin.main import build_parser
from rebalancer.plugin.view import Raw, build_view, find_install, settings_from_env
from tests.unit.kube_objects import daemonset, deployment, node, pod, replicaset

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPOT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
GPU = "sku=gpu:NoSchedule"
CHART_LABELS = {"app.kubernetes.io/part-of": "spot-rebalancer"}
PRICES = """prices:
  - sku: Standard_NC24ads_A100_v4
    region: eastus
    onDemand: 4.0
    spot: 1.0
"""


def controller(namespace: str = "sr", env: dict[str, str] | None = None) -> dict[str, Any]:
    """The controller Deployment as the chart renders it (the parts the plugin reads)."""
    variables = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]
    variables += [{"name": k, "value": v} for k, v in (env or {}).items()]
    return {
        "metadata": {
            "name": "sr-controller",
            "namespace": namespace,
            "labels": {**CHART_LABELS, "app.kubernetes.io/component": "controller"},
        },
        "spec": {
            "replicas": 2,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "controller", "env": variables,
                         "volumeMounts": [{"name": "prices",
                                           "mountPath": "/etc/spot-rebalancer/prices"}]}
                    ],
                    "volumes": [{"name": "prices", "configMap": {"name": "sr-prices"}}],
                }
            },
        },
        "status": {"readyReplicas": 2},
    }  # fmt: skip


ENV = {
    "REBALANCER_LEASE_NAME": "lease1",
    "REBALANCER_POOLS": json.dumps([{"name": "gpuzero", "gpus": 1, "taints": [GPU]}]),
    "REBALANCER_PRICES_FILE": "/etc/spot-rebalancer/prices/prices.yaml",
}


def raw(**changes: Any) -> Raw:
    surge = Surge(base_replicas=3, added=1, event_ids=("E1",), doomed_pods=("inference/llm-1",),
                  deadline="2026-03-01T12:00:30Z")  # fmt: skip
    llm = deployment("llm", [SPOT, GPU], replicas=3,
                     annotations={names.SURGE_ANNOTATION: surge.to_json()})  # fmt: skip
    history = History(
        since=NOW - timedelta(hours=3),
        entries=(Entry("E0", "Preempt", "spot-9", "gpuspot", "eastus-1",
                       "Standard_NC24ads_A100_v4", True, NOW - timedelta(minutes=30)),),
    )  # fmt: skip
    parts: dict[str, Any] = {
        "nodes": [
            node("spot-0", "gpuspot", spot=True, gpus=1, taints=[SPOT, GPU],
                 annotations={names.DRAIN_REQUEST_ANNOTATION: "now"}),
            node("spot-1", "gpuspot", spot=True, gpus=1, taints=[SPOT, GPU]),
            node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]),
            node("sys-0", "system", spot=False, gpus=0, taints=[], sku="Standard_E2s_v9"),
        ],
        "pods": [
            pod("llm-1", "spot-0", owner=("ReplicaSet", "llm-abc")),
            pod("llm-2", "spot-1", owner=("ReplicaSet", "llm-abc")),
            pod("llm-3", "od-0", owner=("ReplicaSet", "llm-abc")),
            pod("llm-4", "", owner=("ReplicaSet", "llm-abc"), ready=False),
            pod("web-1", "sys-0", owner=("ReplicaSet", "web-abc"), gpus=0),
        ],
        "replicasets": [replicaset("llm"), replicaset("web")],
        "deployments": [llm, deployment("web", [], gpus=0), controller(env=ENV)],
        "statefulsets": [],
        "daemonsets": [],
        "history": {"metadata": {"resourceVersion": "7"},
                    "data": {"history.json": history.to_json()}},
        "lease": {"spec": {"holderIdentity": "sr-controller-0",
                           "renewTime": "2026-03-01T11:59:58.000000Z"}},
        "prices": {"data": {"prices.yaml": PRICES}},
    }  # fmt: skip
    parts.update(changes)
    return Raw(**parts)


def test_status_document() -> None:
    document = status.status_of(build_view(raw(), now=NOW, namespace=None))
    assert document["install"] == {
        "namespace": "sr",
        "controller": {"name": "sr-controller", "replicas": 2, "ready": 2},
        "leader": {"identity": "sr-controller-0", "renewed": "2026-03-01T11:59:58Z",
                   "secondsAgo": 2.0},
        "agent": None,
        "settings": "Deployment sr/sr-controller",
    }  # fmt: skip
    pools = {p["name"]: p for p in document["pools"]}
    assert [p["name"] for p in document["pools"]] == ["gpuspot", "gpuondemand", "gpuzero", "system"]
    assert pools["gpuspot"]["priority"] == "spot" and pools["gpuspot"]["nodes"] == 2
    assert pools["gpuspot"]["costPerHour"] == 2.0  # 2 x the price file's spot price
    assert pools["gpuondemand"]["costPerHour"] == 4.0
    assert pools["gpuzero"]["declared"] and pools["gpuzero"]["nodes"] == 0
    assert pools["gpuzero"]["taints"] == [GPU]
    (group,) = pools["gpuspot"]["riskGroups"]
    assert group["sources"] == ["prior", "history"]
    assert not any(r.startswith(("resource_graph", "placement_score")) for r in group["reasons"])
    assert document["risk"]["history"] == {
        "since": "2026-03-01T09:00:00Z", "preempts": {"1h": 1, "6h": 1, "24h": 1}
    }  # fmt: skip
    assert {u["source"] for u in document["risk"]["notSeen"]} == {
        "resource_graph", "placement_score"
    }  # fmt: skip
    (llm,) = document["workloads"]  # web asks for no GPU: not managed
    assert llm["pending"] == 1
    assert llm["pools"] == {
        "gpuondemand": {"priority": "on-demand", "replicas": 1, "ready": 1},
        "gpuspot": {"priority": "spot", "replicas": 2, "ready": 2},
    }
    assert (llm["fallback"], llm["surging"]) == (1, True)
    (notice,) = document["notices"]
    assert (notice["node"], notice["eventType"], notice["secondsLeft"]) == (
        "spot-0",
        "Manual",
        None,
    )
    assert document["surges"][0]["workload"] == "inference/llm"
    assert document["cost"] == {
        "spendPerHour": {"spot": 2.0, "onDemand": 4.0, "total": 6.0},
        "savingsPerHour": 6.0,
        "fallbackReplicas": 1,
        "fallbackCostPerHour": 4.0,
        "unpricedNodes": 1,
        "prices": "file+bundled",
    }
    assert document["problems"] == []


def test_status_text_says_the_same() -> None:
    text = status.render(status.status_of(build_view(raw(), now=NOW, namespace=None)))
    assert "spot-rebalancer in namespace sr: controller 2/2 ready; leader sr-controller-0" in text
    assert "gpuzero (declared)" in text
    assert "inference/llm" in text and "gpuspot=2" in text and "surging" in text
    assert "SPEND 6.00 $/hour (spot 2.00, on-demand 4.00); spot saves 6.00 $/hour" in text


def test_the_users_price_file_wins() -> None:
    view = build_view(raw(), now=NOW, namespace=None, prices_file=PRICES.replace("1.0", "2.0"))
    assert status.status_of(view)["cost"]["spendPerHour"]["spot"] == 4.0


def test_what_cannot_be_read_is_said() -> None:
    view = build_view(
        raw(deployments=[], daemonsets=None, prices=None, problems=("cannot list daemonsets",)),
        now=NOW,
        namespace=None,
    )
    assert view.install.namespace == "spot-rebalancer"
    assert view.problems[0] == "cannot list daemonsets"
    assert "the controller's default settings are assumed" in view.problems[1]
    assert doctor.report(view, doctor.findings_of(view))["problems"] == list(view.problems)


def test_install_found_by_the_charts_labels() -> None:
    agent = daemonset("sr-agent", "other", [],
                      labels={**CHART_LABELS, "app.kubernetes.io/component": "agent"})  # fmt: skip
    two = [controller("b"), controller("a")]
    install = find_install(two, [agent], None)
    assert install.namespace == "a" and "several namespaces (a, b)" in install.problems[0]
    assert find_install(two, [agent], "b").controller == controller("b")
    only_agent = find_install([], [agent], None)
    assert (only_agent.namespace, only_agent.agent) == ("other", agent)
    assert find_install([controller(env=ENV)], [], None).prices_configmap == (
        "sr-prices", "prices.yaml"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "check"),
    [
        ({"REBALANCER_GPU_WORKLOADS_ONLY": "false"}, lambda s, p: not s.planner.gpu_workloads_only),
        (ENV, lambda s, p: s.lease_name == "lease1" and s.planner.pools[0].name == "gpuzero"),
        (
            {"REBALANCER_POOLS": "[not json"},
            lambda s, p: s.planner.pools == [] and "not JSON" in p[0],
        ),
        (
            {"REBALANCER_COOLDOWN_SECONDS": "-1"},
            lambda s, p: s.planner.cooldown_seconds == 600 and "cooldown_seconds" in p[0],
        ),
        ({"REBALANCER_PRICES_FILE": "/in/the/pod"}, lambda s, p: s.prices_file is None and not p),
    ],
)
def test_settings_from_the_controllers_environment(env: dict[str, str], check: Any) -> None:
    settings, problems = settings_from_env(env)
    assert check(settings, problems)


def test_the_users_shell_is_not_the_controllers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REBALANCER_DRY_RUN", "true")
    monkeypatch.setenv("REBALANCER_RESYNC_SECONDS", "nonsense")
    settings, problems = settings_from_env({"REBALANCER_DOCTOR_INTERVAL_SECONDS": "7"})
    assert (settings.dry_run, problems) == (False, [])
    assert settings.doctor_interval_seconds == 7


def test_flags_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--context", "c1", "-n", "sr", "status", "-o", "json"])
    after = parser.parse_args(["doctor", "--kubeconfig", "k", "--context", "c2"])
    assert (before.context, before.namespace, before.output, before.command) == (
        "c1", "sr", "json", "status"
    )  # fmt: skip
    assert (after.kubeconfig, after.context, after.output, after.namespace) == (
        "k", "c2", "text", None
    )  # fmt: skip


def table(text: str, first_header: str, *, header: str | None = None) -> list[dict[str, str]]:
    """The rows of the table whose heading row starts with `first_header`, as dicts, cut at the
    heading's column starts (`header`: that heading row, for output printed without it)."""
    lines = text.splitlines()
    heading = header or next(line for line in lines if line.startswith(first_header + " "))
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", heading)]
    names = [heading[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    begin = lines.index(heading) + 1 if header is None else 0
    rows = []
    for line in lines[begin:]:
        if not line.strip() or line.startswith(heading):
            break
        rows.append(
            {
                n: line[a:b].strip()
                for n, a, b in zip(names, starts, [*starts[1:], None], strict=True)
            }
        )
    return rows


def test_wide_adds_columns_from_the_same_document() -> None:
    document = status.status_of(build_view(raw(), now=NOW, namespace=None))
    narrow, wide = status.render(document), status.render(document, wide=True)
    pools = {row["POOL"]: row for row in table(wide, "POOL")}
    spot = next(p for p in document["pools"] if p["name"] == "gpuspot")
    assert pools["gpuspot"]["TAINTS"] == ",".join(spot["taints"]) == f"{SPOT},{GPU}"
    assert spot["zones"] == sorted({g["zone"] for g in spot["riskGroups"]})  # its nodes' zones
    assert pools["gpuspot"]["ZONES"] == ",".join(spot["zones"])
    assert pools["gpuspot"]["VM SIZES"] == "Standard_NC24ads_A100_v4"
    assert pools["system"]["VM SIZES"] == "Standard_E2s_v9"
    assert pools["gpuzero (declared)"]["ZONES"] == "-"  # no node: no zone seen
    (llm,) = table(wide, "WORKLOAD")
    assert (llm["WORKLOAD"], llm["KIND"], llm["GPUS/REPLICA"]) == (
        "inference/llm",
        "Deployment",
        "1",
    )
    notice = table(wide, "NODE")[0]  # the surge's line follows the one notice
    assert notice["NOT BEFORE"] == (document["notices"][0]["deadline"] or "-")
    # The narrow table is the wide one without the added columns.
    assert [{k: row[k] for k in narrow_row} for row, narrow_row in
            zip(table(wide, "WORKLOAD"), table(narrow, "WORKLOAD"), strict=True)] == table(narrow, "WORKLOAD")  # fmt: skip
    assert "ZONES" not in narrow and "KIND" not in narrow


@pytest.mark.parametrize("wide", [False, True])
def test_no_headers_leaves_out_the_heading_rows_only(wide: bool) -> None:
    document = status.status_of(build_view(raw(), now=NOW, namespace=None))
    full = status.render(document, wide=wide).splitlines()
    bare = status.render(document, wide=wide, headers=False).splitlines()
    headings = [line for line in full if line.startswith(("POOL ", "WORKLOAD ", "NODE "))]
    assert len(headings) == 3
    assert bare == [line for line in full if line not in headings]


def test_doctor_without_its_summary_line() -> None:
    cannot_use_spot = deployment("embed", [GPU], replicas=1)
    base = raw()
    view = build_view(
        raw(deployments=[*base.deployments, cannot_use_spot]), now=NOW, namespace=None
    )
    document = doctor.report(view, doctor.findings_of(view))
    assert document["findings"], "the fixture has findings"
    full, bare = doctor.render(document), doctor.render(document, headers=False)
    assert full.splitlines()[0].startswith(f"{len(document['findings'])} finding")
    assert bare.splitlines() == full.splitlines()[2:]  # the summary and its blank line
    empty = {"findings": [], "summary": {}, "problems": []}
    assert doctor.render(empty) == "No misconfiguration found.\n"
    assert doctor.render(empty, headers=False) == ""


def test_yaml_and_json_are_the_same_document() -> None:
    document = status.status_of(build_view(raw(), now=NOW, namespace=None))
    as_yaml = yaml.safe_load(plugin_main.formatted("yaml", document, ""))
    as_json = json.loads(plugin_main.formatted("json", document, ""))
    assert as_yaml == as_json == json.loads(json.dumps(document))
    assert list(as_yaml) == list(document)  # the document's order, not sorted


def test_a_watch_prints_again_on_a_change_not_on_a_countdown() -> None:
    def steady(now: datetime, **changes: Any) -> Any:
        view = build_view(raw(**changes), now=now, namespace=None)
        return plugin_main.without_countdowns(status.status_of(view))

    later = NOW + timedelta(seconds=7)
    assert status.status_of(build_view(raw(), now=NOW, namespace=None)) != status.status_of(
        build_view(raw(), now=later, namespace=None)
    )
    assert steady(NOW) == steady(later)
    fewer = raw().nodes[1:]
    assert steady(later, nodes=fewer) != steady(NOW)


def test_output_watch_and_header_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["status", "-o", "wide", "--no-headers", "-w", "--watch-interval", "2"]
    )
    assert (args.output, args.no_headers, args.watch, args.watch_interval) == (
        "wide",
        True,
        True,
        2.0,
    )
    default = parser.parse_args(["-o", "yaml", "doctor"])
    assert (default.output, default.no_headers, default.watch, default.watch_interval) == (
        "yaml", False, False, 5.0
    )  # fmt: skip
    for bad in (["status", "-w", "--watch-interval", "0.1"], ["status", "-o", "name"]):
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args(bad)
        assert stopped.value.code == 2


async def test_watch_loop_retries_reconnects_and_stops_mid_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One client per connect, closed each time; a failed read is said and retried with a new
    client; a change is printed, a read that returns the same is not; SIGINT in the middle of
    a read ends the watch with 0."""
    clients: list[Any] = []

    class Client:
        closed = False

        async def close(self) -> None:
            self.closed = True

    async def connect(args: Any) -> Any:
        clients.append(Client())
        return clients[-1]

    stuck = asyncio.Event()
    answers: list[Any] = [raw(), ReadFailed("cannot list /api/v1/pods: boom"), raw(), None]
    fewer = raw(nodes=raw().nodes[1:])
    answers.insert(3, fewer)

    async def gather(client: Any, namespace: str | None) -> Raw:
        assert client is clients[-1] and not client.closed
        answer = answers.pop(0)
        if answer is None:  # the last read hangs until Ctrl-C
            stuck.set()
            await asyncio.Event().wait()
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(plugin_main, "connect", connect)
    monkeypatch.setattr(plugin_main, "gather", gather)
    args = build_parser().parse_args(["status", "-w", "-o", "json"])
    args.watch_interval = 0.001  # below the command line's floor: the loop, not the clock
    out = io.StringIO()
    watching = asyncio.ensure_future(plugin_main.watch(args, ManualClock(NOW), None, out))
    await stuck.wait()
    os.kill(os.getpid(), signal.SIGINT)
    assert await asyncio.wait_for(watching, 10) == 0
    decoder, text, documents = json.JSONDecoder(), out.getvalue(), []
    while text.strip():
        document, end = decoder.raw_decode(text.lstrip())
        documents.append(document)
        text = text.lstrip()[end:]
    assert [d["pools"][0]["nodes"] for d in documents] == [2, 1]  # gpuspot, then one node fewer
    assert "boom; reading again" in capsys.readouterr().err
    assert len(clients) == 2 and all(c.closed for c in clients)


def test_status_says_why_a_target_keeps_what_it_keeps() -> None:
    why = (
        "7 on spot over 3 groups in 3 zone(s) + 0 on-demand (4 spare): expected 99.910 % for a "
        "target of 99.9 % (0 waves of Preempts in 0 h, 0.050/h; riskiest gpuspot3/eastus-3: "
        "0.015/h, hit by 0); 6 on spot + 0 on-demand (one spare fewer) would expect 99.864 %, "
        "33 % of its time below from each of 3 alike, such as gpuspot1/eastus-1 and "
        "gpuspot2/eastus-2 lost together (0.0045/h: the prior alone: no wave yet); 2 more on "
        "on-demand while 3 of 7 spot are Ready; so far 100.000 % of 0.0 d all Ready: 0.0 of 0.0 "
        "min below used"
    )  # as tests/loop/test_targets.py has the controller write it
    llm = deployment("llm", [SPOT, GPU], replicas=3, annotations={
        names.AVAILABILITY_TARGET: "99.9", names.TARGET_WHY: why})  # fmt: skip
    view = build_view(raw(deployments=[llm, controller(env=ENV)]), now=NOW, namespace=None)
    document = status.status_of(view)
    (workload,) = document["workloads"]
    assert (workload["target"], workload["targetWhy"]) == ("99.9", why)
    # Each clause on its own lines (the "; " inside the record's parentheses stays), wrapped at
    # 100 columns.
    text = status.render(document)
    shown = text[text.index("AVAILABILITY TARGETS") :].splitlines()
    assert shown[:9] == [
        "AVAILABILITY TARGETS",
        "- inference/llm 99.9 %:",
        "    7 on spot over 3 groups in 3 zone(s) + 0 on-demand (4 spare): expected 99.910 % for "
        "a target of",
        "      99.9 % (0 waves of Preempts in 0 h, 0.050/h; riskiest gpuspot3/eastus-3: 0.015/h, "
        "hit by 0)",
        "    6 on spot + 0 on-demand (one spare fewer) would expect 99.864 %, 33 % of its time "
        "below from",
        "      each of 3 alike, such as gpuspot1/eastus-1 and gpuspot2/eastus-2 lost together "
        "(0.0045/h: the",
        "      prior alone: no wave yet)",
        "    2 more on on-demand while 3 of 7 spot are Ready",
        "    so far 100.000 % of 0.0 d all Ready: 0.0 of 0.0 min below used",
    ]
    assert status.clauses("a (b; c); d") == ["a (b; c)", "d"]


def test_karpenters_disruption_shows_no_deadline_of_ours() -> None:
    disrupted = {"key": names.KARPENTER_DISRUPTED_TAINT, "effect": "NoSchedule"}
    surge = Surge(base_replicas=3, added=1, event_ids=("KARPENTER-SPOT-1",),
                  doomed_pods=("inference/llm-2",), deadline="2999-01-01T00:00:00Z")  # fmt: skip
    llm = deployment("llm", [SPOT, GPU], replicas=3,
                     annotations={names.SURGE_ANNOTATION: surge.to_json()})  # fmt: skip
    changed = raw()
    changed.nodes[1]["spec"]["taints"].append(disrupted)
    changed.deployments[0] = llm
    text = status.render(status.status_of(build_view(changed, now=NOW, namespace=None)))
    assert "KarpenterDisruption" in text and "none (Karpenter drains)" in text, text
    assert "no deadline (Karpenter drains)" in text, text


def test_a_targets_words_from_a_hostile_annotation_are_shown_whole_and_wrapped() -> None:
    # The words are an annotation anyone with write access to the Deployment can set: a stray
    # ")" or "(" only keeps the rest in one clause, and nothing is lost or reordered.
    assert status.clauses(") a; b") == [") a; b"]
    assert status.clauses("a; (b; c") == ["a", "(b; c"]
    assert status.clauses("; ; a;") == ["a;"]
    # Near the API server's limit for all annotations (256 KiB): every character still shown,
    # no line over 100 columns.
    why = "; ".join(f"clause {i} (x; y)" for i in range(15000))
    llm = deployment("llm", [SPOT, GPU], replicas=3, annotations={
        names.AVAILABILITY_TARGET: "99.9", names.TARGET_WHY: why})  # fmt: skip
    view = build_view(raw(deployments=[llm, controller(env=ENV)]), now=NOW, namespace=None)
    text = status.render(status.status_of(view))
    section = text[text.index("AVAILABILITY TARGETS") :].split("\n\n")[0]
    shown = section.splitlines()[2:]
    assert len(shown) == 15000 and all(len(line) <= 100 for line in shown)
    assert "    clause 0 (x; y)" in shown and "    clause 14999 (x; y)" in shown
