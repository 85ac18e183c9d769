"""What others write cannot grow what the controller keeps: the recorder's "said once" memories,
its per-object maps stay bounded, and keep no text they were fed. (The webhook's placements are
bounded in webhook.py and tested with it; the memory figures under a flood of all of them:
bench/bench_bounded_state.py.)"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from rebalancer import names
from rebalancer.azure.price_book import PriceBook
from rebalancer.clock import ManualClock
from rebalancer.controller import recorder as recorder_module
from rebalancer.controller.accounting import Accountant
from rebalancer.controller.actions import Evict, Outcome, ReportBlocked
from rebalancer.controller.bounded import SaidOnce
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.planner import Plan
from rebalancer.controller.recorder import Recorder
from rebalancer.controller.snapshot import Snapshot
from rebalancer.metrics import ControllerMetrics
from rebalancer.vocabulary import ActionResult, Rejection

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BIG = 50_000
PLAN = Plan(steps=(), active={})
BLOCKED = Outcome(ActionResult.REJECTED, Rejection.BLOCKED, "pdb")


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def emit(self, **event: Any) -> None:
        self.reasons.append(str(event["reason"]))


def make_recorder(events: Events) -> Recorder:
    metrics = ControllerMetrics()
    clock = ManualClock()
    return Recorder(
        metrics=metrics,
        events=events,  # type: ignore[arg-type]
        accountant=Accountant(metrics=metrics, book=PriceBook(clock=clock)),
        clock=clock,
        log=structlog.wrap_logger(structlog.ReturnLogger()),
    )


def workload(name: str, pools_text: str | None) -> WorkloadInfo:
    notes = {} if pools_text is None else {names.POOLS: pools_text}
    return WorkloadInfo.from_json(
        "Deployment",
        {
            "metadata": {"namespace": "ml", "name": name, "annotations": notes},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}},
            "status": {},
        },
    )


def snapshot(*workloads: WorkloadInfo) -> Snapshot:
    return Snapshot(
        now=NOW,
        nodes={},
        pods={},
        workloads={w.key: w for w in workloads},
        replicaset_owners={},
    )


def distinct(index: int, size: int = BIG) -> str:
    return f"{index:08d}" + "X" * (size - 8)  # never a pool name: refused, and new each time


def largest_text_kept(root: object) -> int:
    """The longest string `root` keeps: through containers and the attributes of our own
    objects (not into modules, functions, the metrics registry or the logger)."""
    seen: set[int] = set()
    todo, longest = [root], 0
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, str | bytes):
            longest = max(longest, len(item))
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            todo.extend(item)
        elif type(item).__module__.startswith("rebalancer.controller") and hasattr(
            item, "__dict__"
        ):
            todo.extend(vars(item).values())
    return longest


def test_said_once_is_bounded_and_forgets_the_least_recently_seen() -> None:
    said = SaidOnce(3)
    assert [said.first_time(v) for v in ("a", "b", "c", "a")] == [True, True, True, False]
    assert said.first_time("d") and len(said) == 3  # "b" was the least recently seen
    assert "a" in said and "b" not in said
    assert said.first_time("b")  # forgotten: said once more, never a wrong decision


def test_flooded_refused_policies_and_log_lines_keep_no_text_and_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recorder_module, "LOGGED_ONCE_LIMIT", 20)
    monkeypatch.setattr(recorder_module, "SAID_ONCE_LIMIT", 10)
    events = Events()
    rec = make_recorder(events)
    for index in range(60):
        rec.observe(snapshot(workload("llm", distinct(index))), PLAN, 1.0)
        rec.log_once("notice skipped", distinct(index), node="n1")
        rec.applied(ReportBlocked(("Deployment", "ml", "llm"), distinct(index)), BLOCKED)
        rec.applied(Evict(("ml", f"p{index}"), f"u{index}", "n1", distinct(index)), BLOCKED)
    assert events.reasons.count("SpotRebalancerPolicyRefused") == 60  # each text said once
    assert len(rec._logged) == 20 and len(rec._blocked_said) == len(rec._reported_pods) == 10
    assert len(rec._policy_said) == 1
    assert largest_text_kept(rec) < 1000  # digests, not the 50 KB texts


def test_a_refused_policy_is_said_once_per_text_and_forgotten_with_its_workload() -> None:
    events = Events()
    rec = make_recorder(events)
    refused = "PolicyRefused"
    for text in ("bad pool", "bad pool", "other bad pool"):
        rec.observe(snapshot(workload("llm", text)), PLAN, 1.0)
    assert sum(refused in r for r in events.reasons) == 2
    rec.observe(snapshot(workload("llm", None)), PLAN, 1.0)  # fixed: nothing kept for it
    assert rec._policy_said == {}
    rec.observe(snapshot(workload("llm", "other bad pool")), PLAN, 1.0)  # back: said again
    assert sum(refused in r for r in events.reasons) == 3


def test_what_concerns_gone_pods_and_workloads_is_forgotten() -> None:
    rec = make_recorder(Events())
    rec._placed = {(f"uid-{i}", "policy") for i in range(100)}
    rec._deficit_workloads = {"ml/gone", "ml/llm"}
    rec._surge_started = {("Deployment", "ml", "gone"): 1.0, ("Deployment", "ml", "llm"): 2.0}
    rec.observe(snapshot(workload("llm", None)), PLAN, 1.0)
    assert rec._placed == set()
    assert rec._deficit_workloads == {"ml/llm"}
    assert list(rec._surge_started) == [("Deployment", "ml", "llm")]
