"""The cluster around the controller, played in the fake API on virtual time.

A ReplicaSet (pods up to `spec.replicas`; scaling down removes, in upstream's order, unscheduled
before scheduled, not Ready before Ready, the lowest deletion cost, then the newest), a scheduler
(one GPU per node; spot nodes first unless they are cooling down; never a cordoned or evicting
node), kubelets (a pod is Ready `load_seconds` after it lands) and Azure (a node with a notice is
taken, with its pods, at NotBefore). Enough for whole notices to play out without a test
stepping them by hand.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rebalancer import names
from tests.fakes.api import FakeApi
from tests.loop.rig import CLOCK, azure_takes, becomes_ready, pod


@dataclass
class World:
    api: FakeApi
    load_seconds: float = 10.0
    deadlines: dict[str, datetime] = field(default_factory=dict)  # node -> NotBefore
    after_step: Callable[[], None] | None = None  # called after each change the world makes
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _created: dict[str, float] = field(default_factory=dict)  # pod -> virtual time it landed

    def pods(self) -> list[dict[str, Any]]:
        return [
            obj for (res, ns, _), obj in self.api.objects.items() if res == "pods" and ns == "ml"
        ]

    def ready_pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods()
            if any(c.get("status") == "True" for c in p["status"]["conditions"])
        ]

    def _free_node(self) -> str | None:
        used = {p["spec"].get("nodeName") for p in self.pods()}
        candidates = []
        for (res, _, name), node in self.api.objects.items():
            if res != "nodes" or name in used or node["spec"].get("unschedulable"):
                continue
            keys = {t["key"] for t in node["spec"].get("taints") or []}
            if names.EVICTING_TAINT in keys:
                continue
            spot = node["metadata"]["labels"].get(names.AKS_SPOT_LABEL) == "spot"
            cooling = names.COOLDOWN_TAINT in keys
            candidates.append((not spot or cooling, cooling, name))
        return min(candidates)[2] if candidates else None

    def _scale(self) -> None:
        wanted = int(self.api.get("deployments", "ml", "llm")["spec"]["replicas"])
        pods = self.pods()
        for _ in range(wanted - len(pods)):
            node = self._free_node()
            if node is None:
                break
            name = f"llm-n{next(self._names)}"
            self.api.put_object("pods", pod(name, node, ready=False))
            self._created[name] = CLOCK.monotonic()
        if len(pods) > wanted:

            def rank(p: dict[str, Any]) -> tuple[Any, ...]:
                ready = any(c.get("status") == "True" for c in p["status"]["conditions"])
                cost = int((p["metadata"].get("annotations") or {}).get(names.DELETION_COST, "0"))
                return (ready, cost, -self._created.get(p["metadata"]["name"], 0.0))

            for victim in sorted(pods, key=rank)[: len(pods) - wanted]:
                self.api.remove("pods", "ml", victim["metadata"]["name"])

    def _load(self) -> None:
        now = CLOCK.monotonic()
        for p in self.pods():
            name = p["metadata"]["name"]
            ready = any(c.get("status") == "True" for c in p["status"]["conditions"])
            if not ready and now - self._created.get(name, now) >= self.load_seconds:
                becomes_ready(self.api, name)

    def _azure(self) -> None:
        for node, not_before in list(self.deadlines.items()):
            if CLOCK.now() >= not_before and ("nodes", "", node) in self.api.objects:
                azure_takes(self.api, node)
                del self.deadlines[node]

    async def run(self) -> None:
        while True:
            for step in (self._azure, self._scale, self._load):
                step()
                if self.after_step is not None:
                    self.after_step()
            await asyncio.sleep(0.25)
