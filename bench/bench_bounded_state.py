"""What others write cannot grow the controller's memory: each "said once" memory and the
webhook's placements, flooded with distinct large values, stay flat.

Issue 18 measured +37 MiB for 180 distinct refused policy texts of 198 KB each (linear: every text
was kept to say it once). This floods, in one process, the recorder as the controller wires it:

- refused policies: one Deployment whose `pools` annotation is a new 198 KB text every pass (the
  Warning Event says each once);
- log lines said once: distinct 198 KB subjects;
- blocked fail-overs: distinct 10 KB causes;
- blocked evictions: distinct pods and 1 KB event ids;
- the webhook's placements since the view (`PlacementWebhook.admitted`): placed faster than
  they expire;

and prints the Python heap (tracemalloc, after a collection) before, and after each third of the
flood. Flat means: the last two figures differ by far less than one flooded value.

    .venv/bin/python -m bench.bench_bounded_state            # 180 values each (a few seconds)
    .venv/bin/python -m bench.bench_bounded_state --values 60
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

import structlog

from rebalancer import names
from rebalancer.azure.price_book import PriceBook
from rebalancer.clock import ManualClock
from rebalancer.controller.accounting import Accountant
from rebalancer.controller.actions import Evict, Outcome, ReportBlocked
from rebalancer.controller.admission import Admitted
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.planner import Plan
from rebalancer.controller.recorder import Recorder
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.webhook import PlacementWebhook
from rebalancer.metrics import ControllerMetrics
from rebalancer.vocabulary import ActionResult, Rejection

POLICY_BYTES = 198_000
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Events:
    """An Event sink that counts and keeps nothing (the real one is a bounded queue)."""

    def __init__(self) -> None:
        self.count = 0

    def emit(self, **event: Any) -> None:
        del event
        self.count += 1


def recorder(events: Events) -> Recorder:
    metrics = ControllerMetrics()
    clock = ManualClock()
    book = PriceBook(clock=clock, log=structlog.get_logger())
    return Recorder(
        metrics=metrics,
        events=events,  # type: ignore[arg-type]
        accountant=Accountant(metrics=metrics, book=book),
        clock=clock,
        log=structlog.get_logger(),
    )


def workload(pools_text: str) -> WorkloadInfo:
    return WorkloadInfo.from_json(
        "Deployment",
        {
            "metadata": {
                "namespace": "ml",
                "name": "llm",
                "annotations": {names.POOLS: pools_text},
            },
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}}},
            "status": {},
        },
    )


def snapshot(pools_text: str) -> Snapshot:
    w = workload(pools_text)
    return Snapshot(now=NOW, nodes={}, pods={}, workloads={w.key: w}, replicaset_owners={})


def distinct(index: int, size: int) -> str:
    return f"{index:08d}" + "X" * (size - 8)  # not a pool name: refused, and new each time


def flood(rec: Recorder, webhook: PlacementWebhook, start: int, stop: int) -> None:
    plan = Plan(steps=(), active={})
    blocked = Outcome(ActionResult.REJECTED, Rejection.BLOCKED, "pdb")
    for i in range(start, stop):
        rec.observe(snapshot(distinct(i, POLICY_BYTES)), plan, 1.0)
        rec.log_once("notice skipped", distinct(i, POLICY_BYTES), node="n1")
        rec.applied(ReportBlocked(("Deployment", "ml", "llm"), distinct(i, 10_000)), blocked)
        pod = ("ml", f"pod-{i}")
        rec.applied(Evict(pod, f"uid-{i}", "n1", distinct(i, 1000)), blocked)
        for j in range(100):  # 100 placements a value, all within the webhook's 30 s
            made = Admitted(NOW, ("Deployment", "ml", "llm"), "spot", "eastus-1", True, f"{i}-{j}")
            webhook.admitted.append(made)  # as PlacementWebhook.answer records a placement


def heap_kib() -> float:
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    return current / 1024


def main(values: int) -> None:
    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())  # logs cost nothing here
    events = Events()
    rec = recorder(events)
    webhook = PlacementWebhook(
        lambda: None, metrics=rec.metrics, now=lambda: NOW, log=structlog.get_logger()
    )
    tracemalloc.start()
    flood(rec, webhook, 0, 3)  # warm up: first-use allocations are not the flood
    figures = [("before", 3, heap_kib())]
    started = time.perf_counter()
    thirds = [values // 3, 2 * values // 3, values]
    done = 3
    for upto in thirds:
        flood(rec, webhook, done, upto)
        done = upto
        figures.append((f"after {upto}", upto, heap_kib()))
    elapsed = time.perf_counter() - started
    tracemalloc.stop()
    print(f"flooded {values} distinct values of each kind in {elapsed:.1f}s")
    print(f"  refused policy texts {POLICY_BYTES // 1000} KB, said-once log subjects")
    print(f"  {POLICY_BYTES // 1000} KB, blocked causes 10 KB, blocked evictions 1 KB ids,")
    print(f"  {100 * values} webhook placements within 30 s; Events emitted: {events.count}")
    for label, count, kib in figures:
        print(f"  heap {label:>10} ({count:4d} values): {kib / 1024:8.2f} MiB")
    growth = figures[-1][2] - figures[-2][2]
    per_value = growth * 1024 / max(1, thirds[-1] - thirds[-2])
    print(f"  growth over the last third: {growth:.0f} KiB ({per_value:.0f} bytes per value)")
    print(
        f"  kept: said-once log lines {len(rec._logged)}, blocked causes "
        f"{len(rec._blocked_said)}, blocked evictions {len(rec._reported_pods)}, "
        f"refused policies {len(rec._policy_said)}, placements {len(webhook.admitted)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=180)
    main(parser.parse_args().values)
