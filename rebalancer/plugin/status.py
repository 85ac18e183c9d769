"""`kubectl spot-rebalancer status`: what the controller sees, from one view. Pure.

`status_of(view)` gives one JSON document (the `-o json` and `-o yaml` output, its shape in
docs/interfaces.md); `render(status)` writes the same document as text (`wide`: more columns;
`headers=False`: tables without their heading row, as `kubectl get --no-headers`), so the two
never differ (with control characters from the cluster escaped: `terminal.py`).
Every figure comes from the controller's own code: pools (`pools.py`), managed workloads
(`planner.managed`), notices (`notices.py`), surge and return records (`model.py`), eviction risk
(`risk.py`, from the eviction history and the priors: Azure's feeds are the controller's only),
cost (`cost.py`, with the bundled prices under the controller's price file).
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from rebalancer import names
from rebalancer.controller.cost import cost_rates, price_nodes, spot_capable
from rebalancer.controller.history import WINDOWS
from rebalancer.controller.karpenter import nodepool_pools
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import managed
from rebalancer.controller.pools import Pool, pools_of, with_declared
from rebalancer.controller.records import ReturnRecord
from rebalancer.controller.risk import LEVELS, PLACEMENT_SCORE, RESOURCE_GRAPH, Risk, assess
from rebalancer.notices import karpenter_only
from rebalancer.plugin.terminal import printable_document
from rebalancer.plugin.view import View
from rebalancer.timefmt import iso
from rebalancer.vocabulary import Source

ON_DEMAND = "on-demand"
SPOT = "spot"
# The controller's Azure feeds: the plugin cannot see them (no Azure credentials of its own).
UNSEEN_SOURCES = {
    RESOURCE_GRAPH: "risk_resource_graph_enabled",
    PLACEMENT_SCORE: "risk_placement_score_enabled",
}

Json = dict[str, Any]


def _money(value: float) -> float:
    return round(value, 4)


def _priority(pool: Pool) -> str:
    return SPOT if pool.spot else ON_DEMAND


def status_of(view: View) -> Json:
    snapshot = view.snapshot
    live = pools_of(snapshot.nodes.values())
    # The pools the controller plans with: NodePools' parts too (options.with_nodepools).
    parts = nodepool_pools(view.nodepools or (), live)
    pools = with_declared(live, {**parts, **view.planner.declared_pools})
    risks = assess(
        nodes=snapshot.nodes.values(),
        history=snapshot.history,
        now=view.now,
        settings=view.settings.risk,
    )
    chosen = [w for w in snapshot.workloads.values() if managed(w, view.planner)]
    capable = spot_capable(chosen, live)
    priced = price_nodes(snapshot.nodes.values(), view.prices)
    rates = cost_rates(priced, snapshot.pods.values(), capable, snapshot.owners)
    return {
        "time": iso(view.now),
        "install": _install(view),
        "pools": [
            _pool(pool, live, snapshot.nodes, risks, rates.by_pool) for pool in _sorted(pools)
        ],
        "risk": _risk_sources(view, risks),
        "workloads": [_workload(view, w, capable) for w in sorted(chosen, key=lambda w: w.key)],
        "notices": _notices(view),
        "surges": _surges(chosen),
        "returns": _returns(chosen),
        "cost": {
            "spendPerHour": {
                SPOT: _money(rates.spend("spot")),
                "onDemand": _money(rates.spend("regular")),
                "total": _money(rates.spend("spot") + rates.spend("regular")),
            },
            "savingsPerHour": _money(rates.savings),
            "fallbackReplicas": rates.fallback_replicas,
            "fallbackCostPerHour": _money(rates.fallback_cost),
            "unpricedNodes": rates.unpriced_nodes,
            "prices": view.prices.source,
        },
        "problems": list(view.problems),
    }


def _sorted(pools: dict[str, Pool]) -> list[Pool]:
    return sorted(pools.values(), key=lambda p: (not p.spot, p.name))


def _install(view: View) -> Json:
    install = view.install
    controller = install.controller
    agent = install.agent
    lease = view.lease
    return {
        "namespace": install.namespace,
        "controller": _figures(
            controller, replicas=("spec", "replicas"), ready=("status", "readyReplicas")
        ),
        "leader": None
        if lease is None or not lease.holder
        else {
            "identity": lease.holder,
            "renewed": iso(lease.renewed) if lease.renewed else None,
            "secondsAgo": round((view.now - lease.renewed).total_seconds(), 1)
            if lease.renewed
            else None,
        },
        "agent": _figures(
            agent, desired=("status", "desiredNumberScheduled"), ready=("status", "numberReady")
        ),
        "settings": "defaults"
        if controller is None
        else f"Deployment {install.namespace}/{controller['metadata']['name']}",
    }


def _figures(obj: Json | None, **paths: tuple[str, str]) -> Json | None:
    """An object's name and the counts at these (section, field) paths; None for no object."""
    if obj is None:
        return None
    counts = {
        key: int((obj.get(part) or {}).get(field) or 0) for key, (part, field) in paths.items()
    }
    return {"name": obj["metadata"]["name"], **counts}


def _pool(
    pool: Pool,
    live: dict[str, Pool],
    nodes: Mapping[str, NodeInfo],
    risks: dict[tuple[str, str, str], Risk],
    cost: Any,
) -> Json:
    groups = [risk for key, risk in risks.items() if key[0] == pool.name]
    members = [nodes[name] for name in pool.nodes if name in nodes]
    worst = max(groups, key=lambda r: (LEVELS.index(r.level), r.rate_per_hour), default=None)
    return {
        "name": pool.name,
        "priority": _priority(pool),
        "declared": pool.name not in live,
        "nodes": len(pool.nodes),
        "zones": sorted({node.zone for node in members if node.zone}),
        "vmSizes": sorted({node.sku for node in members if node.sku}),
        "gpusPerNode": pool.gpus_per_node,
        "taints": [str(t) for t in pool.taints],
        "costPerHour": _money(cost.get((pool.name, "spot" if pool.spot else "regular"), 0.0)),
        "risk": None
        if worst is None
        else {"level": worst.level, "ratePerHour": round(worst.rate_per_hour, 4)},
        "riskGroups": [
            {
                "zone": risk.zone,
                "sku": risk.sku,
                "level": risk.level,
                "ratePerHour": round(risk.rate_per_hour, 4),
                "sources": list(risk.sources),
                "reasons": [str(r) for r in risk.reasons if r.source not in UNSEEN_SOURCES],
            }
            for risk in groups
        ],
    }


def _risk_sources(view: View, risks: dict[tuple[str, str, str], Risk]) -> Json:
    history = view.snapshot.history
    used = sorted({source for risk in risks.values() for source in risk.sources})
    return {
        "sources": used,
        "notSeen": [
            {
                "source": source,
                "controller": "enabled" if getattr(view.settings, setting) else "disabled",
            }
            for source, setting in UNSEEN_SOURCES.items()
        ],
        "history": {
            "since": iso(history.since) if history.since else None,
            "preempts": {
                name: len(history.preempts(now=view.now, window=span))
                for name, span in WINDOWS.items()
            },
        },
    }


def _workload(view: View, workload: Any, capable: set[tuple[str, str, str]]) -> Json:
    snapshot = view.snapshot
    per_pool: dict[str, Counter[str]] = defaultdict(Counter)
    fallback = pending = 0
    for pod in snapshot.pods_by_workload.get(workload.key, []):
        if pod.deleting or pod.finished:
            continue
        node = snapshot.nodes.get(pod.node_name)
        if node is None:
            pending += 1  # not scheduled (or on a Node already gone)
            continue
        pool = node.pool
        per_pool[pool]["replicas"] += 1
        per_pool[pool]["ready"] += int(pod.ready)
        if not node.spot and workload.key in capable:
            fallback += 1
    spot_pools = {n.pool for n in snapshot.nodes.values() if n.spot}
    return {
        "kind": workload.kind,
        "namespace": workload.namespace,
        "name": workload.name,
        "replicas": workload.replicas,
        "ready": workload.ready_replicas,
        "gpusPerReplica": workload.gpus_per_replica,
        "pools": {
            pool: {
                "priority": SPOT if pool in spot_pools else ON_DEMAND,
                "replicas": counts["replicas"],
                "ready": counts["ready"],
            }
            for pool, counts in sorted(per_pool.items())
        },
        "pending": pending,
        "fallback": fallback,
        "surging": workload.surge is not None and not workload.surge.completed,
        "returning": names.RETURN_ANNOTATION in workload.annotations,
        # The availability target declared on it and the controller's words for its plan.
        "target": workload.annotations.get(names.AVAILABILITY_TARGET),
        "targetWhy": workload.annotations.get(names.TARGET_WHY),
    }


def _notices(view: View) -> list[Json]:
    found = []
    for node in sorted(view.snapshot.nodes.values(), key=lambda n: n.name):
        for notice in node.notices:
            found.append(
                {
                    "node": node.name,
                    "pool": node.pool,
                    "eventType": notice.event_type,
                    "eventId": notice.event_id,
                    "source": str(notice.source),
                    "deadline": iso(notice.deadline) if notice.deadline else None,
                    "secondsLeft": None
                    if notice.act_now
                    else round(notice.seconds_left(view.now), 1),
                    "cordoned": node.annotations.get(names.CORDONED_FOR) == notice.event_id,
                }
            )
    return found


def _surges(workloads: list[Any]) -> list[Json]:
    return [
        {
            "workload": f"{w.namespace}/{w.name}",
            "baseReplicas": w.surge.base_replicas,
            "added": w.surge.added,
            "eventIds": list(w.surge.event_ids),
            "deadline": w.surge.deadline,
            "completed": w.surge.completed,
        }
        for w in sorted(workloads, key=lambda w: w.key)
        if w.surge is not None
    ]


def _returns(workloads: list[Any]) -> list[Json]:
    found = []
    for w in sorted(workloads, key=lambda w: w.key):
        text = w.annotations.get(names.RETURN_ANNOTATION)
        if text is None:
            continue
        try:
            record = ReturnRecord.from_json(text)
        except ValueError:
            continue
        found.append(
            {
                "workload": f"{w.namespace}/{w.name}",
                "pool": record.pool,
                "retire": record.retire,
                "startedAt": record.started_at,
                "completed": record.completed,
                "gaveUp": record.gave_up,
            }
        )
    return found


# ---- text --------------------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[str]], headers: bool = True) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in ([header] if headers else []) + rows
    ]


def _wide_pool(pool: Json) -> list[str]:
    return [",".join(pool[key]) or "-" for key in ("zones", "vmSizes", "taints")]


def _per_pool(workload: Json, priority: str) -> str:
    parts = [
        f"{pool}={counts['replicas']}"
        + (f" ({counts['ready']} ready)" if counts["ready"] != counts["replicas"] else "")
        for pool, counts in workload["pools"].items()
        if counts["priority"] == priority
    ]
    return ", ".join(parts) or "-"


WIDTH = 100  # a target's words, wrapped


def clauses(why: str) -> list[str]:
    """A target's words split where the controller joined them ("; " outside parentheses):
    the plan, what binds it, the cover, the account, each on a line of its own."""
    out, depth, start = [], 0, 0
    for index, char in enumerate(why):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and why.startswith("; ", index):
            out.append(why[start:index])
            start = index + 2
    out.append(why[start:])
    return [clause for clause in out if clause]


def render(status: Json, *, wide: bool = False, headers: bool = True) -> str:
    """The text of `status`; `wide` adds zones, VM sizes and taints of pools, kind and GPUs per
    replica of workloads, and the deadline's time of notices. Whatever in it came from the cluster
    is shown, not obeyed."""
    status = printable_document(status)
    lines = _render_install(status["install"])
    pools = status["pools"]
    lines += ["", *_table(
        ["POOL", "PRIORITY", "NODES", "GPUS/NODE", "$/HOUR", "EVICTION RISK"]
        + (["ZONES", "VM SIZES", "TAINTS"] if wide else []),
        [
            [
                p["name"] + (" (declared)" if p["declared"] else ""),
                p["priority"],
                str(p["nodes"]),
                str(p["gpusPerNode"]),
                f"{p['costPerHour']:.2f}",
                "-" if p["risk"] is None
                else f"{p['risk']['level']} ({p['risk']['ratePerHour']:.3f}/node-hour)",
            ]
            + (_wide_pool(p) if wide else [])
            for p in pools
        ],
        headers,
    )]  # fmt: skip
    risk = status["risk"]
    unseen = ", ".join(
        f"{u['source']} ({u['controller']} in the controller)" for u in risk["notSeen"]
    )
    history = risk["history"]
    record = (
        f"since {history['since']}, Preempts "
        + ", ".join(f"{count} in {name}" for name, count in history["preempts"].items())
        if history["since"]
        else "no record yet"
    )
    lines.append(
        f"risk sources: {', '.join(risk['sources']) or 'none'}; eviction history: {record}; "
        f"not seen by this plugin: {unseen}"
    )
    workloads = status["workloads"]
    lines.append("")
    if workloads:
        lines += _table(
            ["WORKLOAD", "REPLICAS", "READY", "SPOT", "ON-DEMAND", "PENDING", "FALLBACK", "STATE"]
            + (["KIND", "GPUS/REPLICA"] if wide else []),
            [
                [
                    f"{w['namespace']}/{w['name']}",
                    str(w["replicas"]),
                    str(w["ready"]),
                    _per_pool(w, SPOT),
                    _per_pool(w, ON_DEMAND),
                    str(w["pending"]),
                    str(w["fallback"]),
                    "surging" if w["surging"] else "returning" if w["returning"] else "-",
                ]
                + ([w["kind"], str(w["gpusPerReplica"])] if wide else [])
                for w in workloads
            ],
            headers,
        )
        targeted = [w for w in workloads if w.get("target")]
        if targeted:
            lines += ["", "AVAILABILITY TARGETS"]
            for w in targeted:
                lines.append(f"- {w['namespace']}/{w['name']} {w['target']} %:")
                lines += [
                    line
                    for clause in clauses(w.get("targetWhy") or "no plan written yet")
                    for line in textwrap.wrap(
                        clause,
                        width=WIDTH,
                        initial_indent="    ",
                        subsequent_indent="      ",
                        break_on_hyphens=False,
                    )
                ]
    else:
        lines.append("WORKLOADS: none managed")
    lines += ["", *_render_notices(status, wide=wide, headers=headers)]
    cost = status["cost"]
    spend = cost["spendPerHour"]
    lines += [
        "",
        f"SPEND {spend['total']:.2f} $/hour (spot {spend['spot']:.2f}, on-demand "
        f"{spend['onDemand']:.2f}); spot saves {cost['savingsPerHour']:.2f} $/hour; fallback "
        f"{cost['fallbackReplicas']} replica{'' if cost['fallbackReplicas'] == 1 else 's'} on "
        f"on-demand, {cost['fallbackCostPerHour']:.2f} "
        f"$/hour (prices: {cost['prices']}; unpriced nodes: {cost['unpricedNodes']})",
    ]
    if status["problems"]:
        lines += ["", "NOTES", *(f"- {problem}" for problem in status["problems"])]
    return "\n".join(lines) + "\n"


def _render_install(install: Json) -> list[str]:
    controller, leader, agent = install["controller"], install["leader"], install["agent"]
    parts = [
        "no controller found"
        if controller is None
        else f"controller {controller['ready']}/{controller['replicas']} ready"
    ]
    if leader is not None:
        ago = "" if leader["secondsAgo"] is None else f", renewed {leader['secondsAgo']:.0f}s ago"
        parts.append(f"leader {leader['identity']}{ago}")
    parts.append(
        "no agent DaemonSet"
        if agent is None
        else f"agent {agent['ready']}/{agent['desired']} ready"
    )
    return [
        f"spot-rebalancer in namespace {install['namespace']}: {'; '.join(parts)} "
        f"(settings: {install['settings']})"
    ]


def _render_notices(status: Json, *, wide: bool, headers: bool) -> list[str]:
    lines = []
    notices = status["notices"]
    if notices:
        lines += _table(
            ["NODE", "POOL", "EVENT", "ID", "SOURCE", "DEADLINE", "CORDONED"]
            + (["NOT BEFORE"] if wide else []),
            [
                [
                    n["node"], n["pool"], n["eventType"], n["eventId"], n["source"],
                    _deadline_text(n),
                    "yes" if n["cordoned"] else "no",
                ]
                + ([n["deadline"] or "-"] if wide else [])
                for n in notices
            ],
            headers,
        )  # fmt: skip
    else:
        lines.append("NOTICES: none")
    for surge in status["surges"]:
        lines.append(
            f"surge {surge['workload']}: {surge['baseReplicas']} + {surge['added']} for "
            f"{', '.join(surge['eventIds'])}"
            + (
                ", scaled back"
                if surge["completed"]
                else ", no deadline (Karpenter drains)"
                if karpenter_only(surge["eventIds"])
                else f", deadline {surge['deadline'] or 'now'}"
            )
        )
    for back in status["returns"]:
        state = "gave up" if back["gaveUp"] else "done" if back["completed"] else "in progress"
        lines.append(
            f"return {back['workload']} to spot pool {back['pool']}: {state}, "
            f"retiring {back['retire']}"
        )
    if not status["surges"] and not status["returns"]:
        lines.append("SURGES, RETURNS: none")
    return lines


def _deadline_text(notice: Json) -> str:
    if notice["source"] == str(Source.KARPENTER):
        return "none (Karpenter drains)"  # open-ended: notices.OPEN_ENDED
    return "now" if notice["secondsLeft"] is None else f"in {notice['secondsLeft']:.0f}s"
