"""The admission review of one Pod creation: which workload it belongs to, its policy, where it
goes. Pure: `webhook.py` serves it over HTTPS; the view is the controller's last pass.

A replacement made for a replica under notice, and every pod of a workload that keeps spare
replicas, carry Karpenter's `karpenter.sh/do-not-disrupt: "true"` (unless the pod says otherwise)
for as long as they run: Karpenter's consolidation or drift would otherwise take their node
and start them again elsewhere, break before make (a replacement still loading, a fail-over
replica moved between on-demand nodes, a workload's spares packed onto fewer nodes, the hedge
they are for). It blocks only voluntary disruption; a spot eviction still takes the pod.
The pods themselves go when the surge scales back or the return retires them, so the
annotation never outlives the reason. A return's (or a move's) new replica is held the same
way while it loads, marked `spot-rebalancer.io/held-until-ready`: it stays, an ordinary
replica, and the controller removes both once it is Ready and the return is over
(planning/load_holds.py). So is a replacement for a replica on a node Karpenter disrupts
(drift, consolidation, expiry: no capacity is going away), which is placed as any new replica,
not failed over. Replacements and returns are held whether or not the workload has a
placement policy: the surge or the return is what they are for.

Every path that does not place a pod allows it unchanged: the webhook may refuse nothing (its
failure policy is Ignore as well), so a bug, a stale cache or an odd pod costs placement, never
a deployment.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from rebalancer import names
from rebalancer.controller.actions import Action, ScaleUp, SetSpare, StartReturn
from rebalancer.controller.model import WorkloadInfo, gpus_of, unreadable_gpus
from rebalancer.controller.placement import Decision, Group, Where, affinity_patch, choose
from rebalancer.controller.placement import spot_groups as groups_of
from rebalancer.controller.policy import in_force
from rebalancer.controller.pools import Pool, pools_of, with_declared
from rebalancer.controller.records import Spare
from rebalancer.controller.returns import active_record
from rebalancer.controller.risk import GroupKey, Risk
from rebalancer.controller.scheduling import match_expression
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.notices import karpenter_only
from rebalancer.vocabulary import Source


@dataclass(frozen=True)
class Admitted:
    """A placement the webhook made: counted until the caches show its pod (the one carrying
    `review` in its annotations) as one of the workload's, or for `webhook.RECENT_SECONDS`."""

    at: datetime
    workload: WorkloadKey
    pool: str
    zone: str
    spot: bool
    review: str  # the AdmissionReview's uid, which the pod carries (names.PLACED_REVIEW)


@dataclass(frozen=True)
class View:
    """What placement reads: one pass's snapshot and risks, the declared pools, and the
    workloads that pass surges."""

    snapshot: Snapshot
    risks: Mapping[GroupKey, Risk]
    declared: Mapping[str, Pool] = field(default_factory=dict)
    # The pass's surges: the ReplicaSet creates their replacements within milliseconds of the
    # write, before the next pass shows the surge record, so the snapshot alone would place
    # them as ordinary new pods (spread on spot) instead of where `failover-to` sends them.
    surging: frozenset[WorkloadKey] = frozenset()
    # The pass's spare records (an availability target's `spot` among them), for the same
    # reason: the first new replicas of a plan were placed without it on the real control plane.
    spares: Mapping[WorkloadKey, Spare | None] = field(default_factory=dict)
    # The pass's returns and moves started, for the same reason: their new replica loads held.
    returning: frozenset[WorkloadKey] = frozenset()
    # The pass's surges for Karpenter's disruptions alone: replacements placed as new replicas.
    in_place: frozenset[WorkloadKey] = frozenset()

    @classmethod
    def of_pass(
        cls,
        snapshot: Snapshot,
        actions: Iterable[Action],
        *,
        risks: Mapping[GroupKey, Risk],
        declared: Mapping[str, Pool],
    ) -> View:
        """The view of a pass that decided `actions`."""
        actions = list(actions)
        surging = frozenset(a.workload for a in actions if isinstance(a, ScaleUp))
        spares = {a.workload: a.record for a in actions if isinstance(a, SetSpare)}
        returning = frozenset(a.workload for a in actions if isinstance(a, StartReturn))
        in_place = frozenset(
            a.workload
            for a in actions
            if isinstance(a, ScaleUp)
            and a.record is not None
            and karpenter_only(a.record.event_ids)
        )
        return cls(snapshot, risks, declared, surging, spares, returning, in_place)

    @cached_property
    def pools(self) -> dict[str, Pool]:
        return with_declared(pools_of(self.snapshot.nodes.values()), self.declared)

    @cached_property
    def groups(self) -> list[Group]:
        return groups_of(self.pools.values(), self.risks)

    @cached_property
    def evicting(self) -> set[tuple[str, str]]:
        # Spot evictions: a node Karpenter disrupts says nothing about its group's capacity.
        return {
            (n.pool, n.zone)
            for n in self.snapshot.nodes.values()
            if any(notice.source != Source.KARPENTER for notice in n.notices)
        }

    def where(self, workload: WorkloadKey, admitted: Iterable[Admitted]) -> Where:
        counts: dict[tuple[str, str], int] = {}
        on_demand = 0
        under_notice = 0  # on spot nodes under notice: going, not counted as spot kept
        nodes = self.snapshot.nodes
        shown: set[str] = set()  # the reviews whose pods this view counts (or has seen go)
        for pod in self.snapshot.pods_by_workload.get(workload, []):
            shown.add(pod.placed_review)
            if pod.deleting or pod.finished:
                continue
            node = nodes.get(pod.node_name) if pod.node_name else None
            if node is not None:
                pool, zone, spot = node.pool, node.zone, node.spot
            elif pod.placed:  # not scheduled yet: where we sent it
                pool, _, zone = pod.placed.partition("/")
                spot = self.pools[pool].spot if pool in self.pools else False
            else:
                continue
            counts[(pool, zone)] = counts.get((pool, zone), 0) + 1
            on_demand += 0 if spot else 1
            under_notice += 1 if spot and node is not None and node.notices else 0
        # Not "made after the view was built": a view built just after an answer often lacks
        # the pod yet (the API server writes it after the answer; the watch brings it later), and
        # the next pod of a burst went to on-demand again (the real API server showed it).
        for made in admitted:
            if made.workload == workload and made.review not in shown:
                counts[(made.pool, made.zone)] = counts.get((made.pool, made.zone), 0) + 1
                on_demand += 0 if made.spot else 1
        return Where(counts, on_demand, under_notice)

    def workload_of(self, pod: Mapping[str, Any], namespace: str) -> WorkloadInfo | None:
        """Through the pod's controller reference (a ReplicaSet the caches may not have yet is
        matched by the Deployments' selectors)."""
        meta = pod.get("metadata") or {}
        owner = next(
            (o for o in meta.get("ownerReferences") or [] if o.get("controller") is True), None
        )
        if owner is None:
            return None
        kind, name = owner.get("kind"), owner.get("name")
        workloads = self.snapshot.workloads
        if kind == "StatefulSet":
            return workloads.get(("StatefulSet", namespace, str(name)))
        if kind != "ReplicaSet":
            return None
        deployment = self.snapshot.replicaset_owners.get((namespace, str(name)))
        if deployment is not None:
            return workloads.get(("Deployment", namespace, deployment))
        labels = meta.get("labels") or {}
        matching = [
            w
            for w in workloads.values()
            if w.kind == "Deployment"
            and w.namespace == namespace
            and matches_selector(w.selector, labels)
        ]
        return matching[0] if len(matching) == 1 else None


def matches_selector(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a Deployment's selector selects `labels` (an empty one selects nothing here)."""
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not wanted and not expressions:
        return False  # an empty selector is refused for Deployments; never match all
    return all(labels.get(k) == v for k, v in wanted.items()) and all(
        match_expression(e, labels) for e in expressions
    )


@dataclass(frozen=True)
class Review:
    """The answer to one AdmissionReview, and what it meant."""

    response: dict[str, Any]
    # placed | no_policy | not_pod | no_fit | unknown_workload | unreadable | bad_request
    outcome: str
    decision: Decision | None = None
    workload: WorkloadInfo | None = None
    # A server-side dry run (`kubectl create --dry-run=server`): answered like any other, but no
    # pod follows, so it must not count as a placement (the webhook declares sideEffects None).
    dry_run: bool = False


# The API server's uids are UUIDs (36 characters); the webhook remembers the uids of its recent
# placements, so a longer one is not a review it answers.
MAX_UID_LENGTH = 128


def review(
    body: Any,
    view: View | None,
    admitted: Iterable[Admitted],
    *,
    unseen: WorkloadInfo | None = None,
) -> Review:
    """The answer to one AdmissionReview. `unseen`: the pod's workload as the API has it, when
    the view does not show it yet (`owner_lookup.py`: a brand-new workload's first pods)."""
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    if not isinstance(request, dict) or not isinstance(uid, str) or len(uid) > MAX_UID_LENGTH:
        return Review({}, "bad_request")

    def allow(outcome: str, **extra: Any) -> Review:
        response = {"uid": uid, "allowed": True}
        if "patch" in extra:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(extra.pop("patch")).encode()).decode()
        return Review(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response},
            outcome,
            dry_run=request.get("dryRun") is True,
            **extra,
        )

    pod = request.get("object")
    kind = (request.get("kind") or {}).get("kind")
    if kind != "Pod" or request.get("operation") != "CREATE" or not isinstance(pod, dict):
        return allow("not_pod")
    if view is None:
        return allow("not_ready")
    workload = view.workload_of(pod, str(request.get("namespace") or "")) or unseen
    if workload is None:
        return allow("unknown_workload")
    own = (pod.get("metadata") or {}).get("annotations")
    unheld = names.KARPENTER_DO_NOT_DISRUPT not in (own or {})
    surge = workload.surge
    surge_open = (surge is not None and not surge.completed) or workload.key in view.surging
    in_place = workload.key in view.in_place or (
        workload.key not in view.surging and surge is not None and karpenter_only(surge.event_ids)
    )
    failing_over = surge_open and not in_place
    # A return's new replica, or a replacement for Karpenter's disruption: held while it loads.
    until_ready = (
        active_record(workload) is not None
        or workload.key in view.returning
        or (surge_open and in_place)
    )
    policy = in_force(workload.annotations).policy
    if policy is None or workload.opted_out:
        if workload.opted_out or not unheld or not (failing_over or until_ready):
            return allow("no_policy", workload=workload)
        # Not placed, but the replacement or the return's replica is loading all the same.
        held = _held(failing_over=failing_over, spare=False)
        return allow("no_policy", patch=_annotations_added(own, held), workload=workload)
    spec = pod.get("spec") or {}
    if unreadable_gpus(spec):  # e.g. full-width digits: never placed as if they were numbers
        return allow("unreadable", workload=workload)
    gpus = gpus_of(spec)
    fits = [pool for pool in view.pools.values() if not pool.problems_for(spec, gpus)]
    spare = view.spares.get(workload.key, workload.spare)
    decision = choose(
        policy,
        fits=fits,
        groups=view.groups,
        where=view.where(workload.key, admitted),
        failing_over=failing_over,
        evicting=view.evicting,
        target_spot=spare.spot if policy.target and spare is not None else None,
        target_waiting=spare.waiting if spare is not None else (),
    )
    hold = unheld and (failing_over or until_ready or policy.spare)
    held = _held(failing_over=failing_over, spare=policy.spare > 0) if hold else {}
    if decision is None:
        # Not placed (no spot group it accepts yet: a new NodePool's nodes not yet assessed),
        # but a spare or a replacement is kept from consolidation all the same.
        if not hold:
            return allow("no_fit", workload=workload)
        return allow("no_fit", patch=_annotations_added(own, held), workload=workload)
    patch = affinity_patch(pod, decision)
    added = [(names.PLACED_WHY, decision.reason), (names.PLACED_REVIEW, uid), *held.items()]
    for name, value in added:
        key = name.replace("~", "~0").replace("/", "~1")
        patch.append({"op": "add", "path": f"/metadata/annotations/{key}", "value": value})
    return allow("placed", patch=patch, decision=decision, workload=workload)


def _held(*, failing_over: bool, spare: bool) -> dict[str, str]:
    """Karpenter's do-not-disrupt, for good (a replacement, a spare: they go when their reason
    does) or, for a return's new replica alone, marked to be removed once it has loaded."""
    held = {names.KARPENTER_DO_NOT_DISRUPT: "true"}
    if not (failing_over or spare):
        held[names.HELD_UNTIL_READY] = "true"
    return held


def _annotations_added(
    own: Mapping[str, str] | None, added: Mapping[str, str]
) -> list[dict[str, Any]]:
    """RFC 6902 operations that add annotations to a pod that may have none."""
    if own is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(added)}]
    return [
        {"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"),
         "value": v}
        for k, v in added.items()
    ]  # fmt: skip
