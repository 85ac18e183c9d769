"""The doctor's checks: misconfigurations of spot GPU setups that the field keeps hitting. Pure.

Each check reads a `Setup` (the Nodes, the workloads the controller manages, the DaemonSets, the
pools declared in the settings and, when known, the cluster autoscaler's node groups) and returns
`Finding`s: on which object, what is wrong, why it matters, what to change and the YAML that
changes it. The same checks run in `kubectl spot-rebalancer doctor` (`rebalancer/plugin`) and in
the controller, every few minutes, as Warning Events and a gauge (`controller/doctor.py`).

What it is not: a linter of manifests. Each check is a failure seen in the field, judged from the
cluster as it is (KAITO had to add the spot toleration to its GPU device plugin and workspace
pods; NVIDIA Dynamo's AKS spot guide exists to get the tolerations right):

- a spot GPU pool whose nodes advertise no `nvidia.com/gpu`, because the device-plugin DaemonSet
  does not tolerate the spot taint (or there is none, or it should run there and does not);
- our own agent's DaemonSet cannot run on a spot pool (the controller then hears of evictions
  late, through AKS's node-problem-detector, or not at all);
- a managed workload that no spot pool takes (no spot toleration: spot saves nothing on it);
- a managed workload that no on-demand pool takes (nowhere to fail over);
- an on-demand pool autoscaled at zero that the settings do not declare (the controller cannot
  see its taints, so it reports fail-over blocked); under NAP, a NodePool's on-demand part whose
  GPUs per node neither its requirements nor its nodes say (the rest of it the controller reads
  from the NodePool);
- on-demand GPU nodes that stayed empty for long after their GPU pods left before the cluster
  autoscaler removed them (its profile's scale-down settings, which are not visible in the
  cluster: judged from what the controller saw, `idle_nodes.py`; docs/cost.md);
- under AKS node auto-provisioning (Karpenter NodePools): a GPU NodePool that may launch spot
  only while nothing else offers on-demand GPUs (no fail-over path), and a GPU NodePool whose
  spot nodes get a taint that no device plugin tolerates (judged from the NodePool, so before
  any such node exists: NAP launches and consolidates them all the time), and a GPU NodePool
  that may launch on-demand but whose empty nodes Karpenter never removes (`consolidateAfter:
  Never`, or a budget of 0 nodes for Empty): the emptied fallback nodes stay paid for;
- a KAITO Workspace whose pods tolerate the taints of no spot GPU capacity the cluster has (an
  older KAITO, KAITO set to another cloud provider, or spot capacity tainted otherwise than AKS's
  spot taint): reported on the Workspace, since that is where a template Workspace's tolerations
  are set, and where KAITO's own are the cause.

A check that needs data the caller could not read (DaemonSets, node groups: None) is skipped,
never guessed: a finding must be true.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import yaml

from rebalancer import names, pool_kind
from rebalancer.controller.kaito import (
    API_VERSION as KAITO_API_VERSION,
)
from rebalancer.controller.kaito import (
    SPOT_TOLERATION_SINCE,
    WorkspaceInfo,
    made_by_kaito,
    workload_of,
)
from rebalancer.controller.karpenter import (
    EMPTY_NODE_GRACE,
    GPU_COUNT_KEY,
    NodePoolInfo,
    nodepool_pools,
    spot_only_patch,
)
from rebalancer.controller.model import DaemonSetInfo, NodeInfo, ScalerInfo, WorkloadInfo
from rebalancer.controller.planner import Settings, managed
from rebalancer.controller.policy import in_force
from rebalancer.controller.pools import Pool, on_demand_fallback, pools_of, with_declared
from rebalancer.controller.scheduling import Taint, untolerated
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.target import MAX_TARGET_REPLICAS
from rebalancer.vocabulary import Check

ERROR = "error"
WARNING = "warning"
SEVERITIES = (ERROR, WARNING)  # most severe first

# A DaemonSet is an NVIDIA device plugin when its name or one of its images says so: the upstream
# manifest and AKS's docs (`nvidia-device-plugin-daemonset`), the GPU Operator's and KAITO's all
# run `nvcr.io/nvidia/k8s-device-plugin`.
DEVICE_PLUGIN_MARKERS = ("nvidia-device-plugin", "k8s-device-plugin")
# Azure N-series sizes with NVIDIA GPUs (NC, ND, NV); AKS also labels such nodes
# `kubernetes.azure.com/accelerator=nvidia`.
GPU_SKU = re.compile(r"^standard_n[cdv]", re.IGNORECASE)
# How AKS names the VM scale set of a pool, which is what the cluster autoscaler lists.
AKS_NODE_GROUP = re.compile(r"^aks-(?P<pool>[a-z0-9]+)-\d+-vmss$")
# A new GPU node shows its GPUs once the device plugin's pod has started and registered: seconds
# to a minute or two. Younger nodes are not blamed for having none.
GPU_REGISTRATION_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class ObjectRef:
    kind: str  # a Kubernetes kind, or "NodePool" for a pool (not an API object)
    namespace: str
    name: str
    uid: str = ""
    api_version: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


@dataclass(frozen=True)
class Finding:
    check: Check
    severity: str  # ERROR | WARNING
    object: ObjectRef  # what to change (or, for a pool, what is affected)
    what: str  # what is wrong
    why: str  # why it matters
    fix: str  # what to change, in one or two sentences
    yaml: str = ""  # the YAML to add; "" when no snippet can say it
    command: str = ""  # how to apply `yaml`, or how to look further

    @property
    def key(self) -> tuple[str, str, str, str]:
        return str(self.check), self.object.kind, self.object.namespace, self.object.name

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.check),
            "severity": self.severity,
            "object": {
                "kind": self.object.kind,
                "namespace": self.object.namespace,
                "name": self.object.name,
            },
            "what": self.what,
            "why": self.why,
            "fix": self.fix,
            "yaml": self.yaml,
            "command": self.command,
        }


@dataclass(frozen=True)
class NodeGroup:
    """A node group of the cluster autoscaler (its status ConfigMap), with the AKS pool it is."""

    name: str  # as the autoscaler lists it: the pool's VM scale set on AKS
    pool: str  # "" when the name is not an AKS scale set's
    min_size: int
    max_size: int
    registered: int  # nodes registered now


@dataclass(frozen=True)
class IdleSpell:
    """An on-demand GPU node that had a GPU pod, then none, until the cluster autoscaler removed
    it: `seconds` is at least how long it stayed empty (between the first and the last time it
    was seen empty)."""

    node: str
    pool: str
    seconds: float
    ended: datetime


@dataclass(frozen=True)
class Setup:
    nodes: Sequence[NodeInfo]
    workloads: Sequence[WorkloadInfo]  # the managed ones (failed over make-before-break)
    daemonsets: Sequence[DaemonSetInfo] | None  # None: could not be read, DaemonSet checks skipped
    declared_pools: Mapping[str, Pool]
    node_groups: Sequence[NodeGroup] | None = None  # None: the autoscaler's status is not known
    spot_pools_seen: frozenset[str] = frozenset()  # pools the eviction history knows as spot
    now: datetime | None = None  # None: every node counts as old enough to judge
    # On-demand GPU nodes seen empty after their GPU pods left, until removed (the controller's
    # own watch); None: not watched (the plugin sees one instant), the check is skipped.
    idle_spells: Sequence[IdleSpell] | None = None
    idle_limit_seconds: float = 300.0
    # The chart fixes are applied to: the published one the release came from, when known.
    helm_upgrade: str = "helm upgrade <release> <chart> --reuse-values -f fix.yaml"
    nodepools: Sequence[NodePoolInfo] | None = None  # Karpenter's; None: not read, checks skipped
    # Deployments whose HPA an operator owns and whose bounds cannot be held:
    # (namespace, name) -> (why, the fix).
    operated: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # KAITO's Workspaces, [] without KAITO; None: not read, their check skipped.
    workspaces: Sequence[WorkspaceInfo] | None = None
    # The workloads KAITO made for them, managed or not (the check is about KAITO's setup).
    kaito_workloads: Sequence[WorkloadInfo] = ()


def helm_upgrade_command(chart: str, version: str) -> str:
    """`helm upgrade` with a fix's values, on the chart (and version) the release was installed
    from: a user has the published chart, not a checkout's `charts/` folder."""
    pinned = f" --version {version}" if version else ""
    return f"helm upgrade <release> {chart or '<chart>'}{pinned} --reuse-values -f fix.yaml"


def setup_of(
    snapshot: Snapshot,
    *,
    settings: Settings,
    daemonsets: Sequence[DaemonSetInfo] | None,
    node_groups: Sequence[NodeGroup] | None = None,
    nodepools: Sequence[NodePoolInfo] | None = None,
    idle_spells: Sequence[IdleSpell] | None = None,
    idle_limit_seconds: float = 300.0,
    helm_upgrade: str = "",
    workspaces: Sequence[WorkspaceInfo] | None = None,
) -> Setup:
    """The checks' input from the controller's view of the cluster and its planner settings
    (which workloads it manages, which pools it declares)."""
    return Setup(
        nodes=tuple(snapshot.nodes.values()),
        workloads=tuple(w for w in snapshot.workloads.values() if managed(w, settings)),
        daemonsets=daemonsets,
        declared_pools=settings.declared_pools,
        node_groups=node_groups,
        spot_pools_seen=frozenset(e.pool for e in snapshot.history.entries if e.spot),
        now=snapshot.now,
        nodepools=nodepools,
        idle_spells=idle_spells,
        idle_limit_seconds=idle_limit_seconds,
        helm_upgrade=helm_upgrade or Setup.helm_upgrade,
        workspaces=workspaces,
        kaito_workloads=tuple(w for w in snapshot.workloads.values() if made_by_kaito(w)),
        operated={
            (s.namespace, s.target[1]): _operated(s)
            for s in snapshot.scalers.values()
            if s.operated and s.target[0] == "Deployment"
        },
    )


def diagnose(setup: Setup) -> list[Finding]:
    """Every finding, errors first."""
    live = pools_of(setup.nodes)
    findings: list[Finding] = []
    if setup.daemonsets is not None:
        findings += device_plugin_findings(setup.nodes, live, setup.daemonsets, now=setup.now)
        findings += agent_findings(live, setup.daemonsets)
    findings += spot_findings(setup.workloads, with_declared(live, offline_pools(setup, live)))
    if setup.workspaces is not None:
        kaito = workspace_findings(setup, live)
        # Said on the Workspace, where the fix belongs: not again on the workload KAITO made.
        reported = {(f.object.namespace, f.object.name) for f in kaito}
        made = {
            (w.kind, w.namespace, w.name)
            for w in setup.kaito_workloads
            if w.owner is not None and (w.namespace, w.owner.name) in reported
        }
        findings = [
            f
            for f in findings
            if f.check != Check.WORKLOAD_NOT_ON_SPOT
            or (f.object.kind, f.object.namespace, f.object.name) not in made
        ] + kaito
    findings += target_findings(setup)
    no_fallback = fallback_findings(setup, live)
    findings += no_fallback
    if no_fallback and setup.node_groups is not None:
        findings += undeclared_pool_findings(setup, live, no_fallback)
    if setup.idle_spells is not None:
        limit = setup.idle_limit_seconds
        findings += idle_fallback_findings(setup.idle_spells, limit_seconds=limit)
    if setup.nodepools is not None:
        findings += spot_only_nodepool_findings(setup, live)
        findings += empty_nodes_kept_findings(setup, live)
        if no_fallback:
            findings += undeclared_nodepool_findings(setup, live, no_fallback)
        if setup.daemonsets is not None:
            said = {f.key for f in findings}
            findings += [
                f
                for f in nodepool_device_plugin_findings(setup.nodepools, setup.daemonsets)
                if f.key not in said
            ]
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.check, f.key))


# ---- what the checks share -------------------------------------------------------------------


def offline_pools(setup: Setup, live: Mapping[str, Pool]) -> dict[str, Pool]:
    """The pools no node may show yet, as the controller plans with them: the NodePools' parts
    and the declared pools, a declaration winning (reconciler.py `pass_settings`)."""
    return {**nodepool_pools(setup.nodepools or (), live), **setup.declared_pools}


def is_gpu_node(node: NodeInfo) -> bool:
    return (
        node.allocatable_gpus > 0
        or node.labels.get(names.AKS_ACCELERATOR_LABEL) == "nvidia"
        or bool(GPU_SKU.match(node.sku))
    )


def is_device_plugin(daemonset: DaemonSetInfo) -> bool:
    texts = (daemonset.name, *daemonset.images)
    return any(marker in text for marker in DEVICE_PLUGIN_MARKERS for text in texts)


def is_our_agent(daemonset: DaemonSetInfo) -> bool:
    labels = daemonset.labels
    return labels.get(names.PART_OF_LABEL) == names.PART_OF and (
        labels.get(names.COMPONENT_LABEL) == "agent"
    )


def toleration_for(taint: Taint) -> dict[str, str]:
    """The toleration that matches exactly this taint (Equal with its value, else Exists)."""
    if taint.value:
        return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def tolerations_patch(existing: Sequence[Mapping[str, Any]], missing: Iterable[Taint]) -> str:
    """A patch of a pod template's tolerations: the whole list, as a strategic merge patch
    replaces it (tolerations have no merge key), the existing ones kept."""
    kept = [dict(t) for t in existing]
    added = [toleration_for(t) for t in missing if toleration_for(t) not in kept]
    document = {"spec": {"template": {"spec": {"tolerations": kept + added}}}}
    header = (
        f"# The pod template's whole tolerations list ({len(kept)} kept, {len(added)} added): "
        "a patch replaces the list.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)


def _patch_command(ref: ObjectRef) -> str:
    return f"kubectl -n {ref.namespace} patch {ref.kind.lower()} {ref.name} --patch-file fix.yaml"


def _taints_only(problems: Sequence[str]) -> bool:
    return all(problem.startswith("taint ") for problem in problems)


def _untolerated(template_spec: Mapping[str, Any], pool: Pool) -> list[Taint]:
    return untolerated(template_spec.get("tolerations") or [], pool.taints)


def _helm_note(release: str) -> str:
    if not release:
        return ""
    return (
        f" Helm release {release} owns it: put the same list in that release's values too, or "
        "its next upgrade undoes the patch."
    )


def _daemonset_ref(daemonset: DaemonSetInfo) -> ObjectRef:
    return ObjectRef("DaemonSet", daemonset.namespace, daemonset.name, daemonset.uid, "apps/v1")


def _workload_ref(workload: WorkloadInfo) -> ObjectRef:
    return ObjectRef(workload.kind, workload.namespace, workload.name, workload.uid, "apps/v1")


def _count(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


# ---- the device plugin -------------------------------------------------------------------------


def device_plugin_findings(
    nodes: Sequence[NodeInfo],
    live: Mapping[str, Pool],
    daemonsets: Sequence[DaemonSetInfo],
    *,
    now: datetime | None = None,
) -> list[Finding]:
    """Spot GPU pools with nodes that advertise no `nvidia.com/gpu`, and why. A device plugin
    that may run there is blamed only for nodes older than `GPU_REGISTRATION_GRACE`."""
    by_name = {node.name: node for node in nodes}
    plugins = [ds for ds in daemonsets if is_device_plugin(ds)]
    findings: list[Finding] = []
    for pool in sorted(live.values(), key=lambda p: p.name):
        members = [by_name[name] for name in pool.nodes]
        if not pool.spot or not any(is_gpu_node(node) for node in members):
            continue
        bare = [n for n in members if is_gpu_node(n) and n.allocatable_gpus == 0 and n.ready]
        if not bare:
            continue
        where = (
            f"spot GPU pool {pool.name}: {_count(len(bare), 'Ready node')} of {len(members)} "
            "advertise no nvidia.com/gpu"
        )
        why = (
            "GPU pods cannot be scheduled there: replicas that prefer spot land on on-demand "
            "nodes (or stay Pending), so spot saves nothing, and the controller never moves them "
            "back to a pool without GPUs."
        )
        if not plugins:
            findings.append(_no_device_plugin(pool, bare[0], where, why))
            continue
        fitting = [ds for ds in plugins if not pool.problems_for(ds.template_spec)]
        settled = [n for n in bare if now is None or n.created is None
                   or now - n.created >= GPU_REGISTRATION_GRACE]  # fmt: skip
        for plugin in fitting if settled else ():
            ref = _daemonset_ref(plugin)
            findings.append(
                Finding(
                    Check.GPUS_NOT_ADVERTISED,
                    WARNING,
                    ref,
                    f"{where}, though {ref} may run there",
                    why,
                    "Its pod on those nodes is not registering GPUs: look at that pod (not "
                    "running, crashing, or the NVIDIA driver missing on the node).",
                    command=(
                        f"kubectl -n {plugin.namespace} get pods -o wide "
                        f"--field-selector spec.nodeName={settled[0].name}"
                    ),
                )
            )
        if fitting:
            continue
        for plugin in plugins:
            ref = _daemonset_ref(plugin)
            problems = pool.problems_for(plugin.template_spec)
            missing = _untolerated(plugin.template_spec, pool)
            fix = "Add the pool's taints to its pod template's tolerations."
            if not _taints_only(problems):
                fix += " It also needs its nodeSelector or node affinity to allow the pool."
            findings.append(
                Finding(
                    Check.DEVICE_PLUGIN_NOT_ON_SPOT,
                    ERROR,
                    ref,
                    f"{where}: the device plugin {ref} cannot run there ({', '.join(problems)})",
                    why,
                    fix + _helm_note(plugin.helm_release),
                    yaml=tolerations_patch(plugin.template_spec.get("tolerations") or [], missing)
                    if missing
                    else "",
                    command=_patch_command(ref) if missing else "",
                )
            )
    return findings


def _no_device_plugin(pool: Pool, node: NodeInfo, where: str, why: str) -> Finding:
    tolerations = [toleration_for(t) for t in pool.taints]
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
            "template": {
                "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": tolerations,
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:<version>",
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {
                                    "name": "device-plugin",
                                    "mountPath": "/var/lib/kubelet/device-plugins",
                                }
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "device-plugin",
                            "hostPath": {"path": "/var/lib/kubelet/device-plugins"},
                        }
                    ],
                },
            },
        },
    }
    header = (
        "# NVIDIA's device plugin with this pool's tolerations; pick the image version NVIDIA "
        "or the AKS GPU docs name.\n"
    )
    return Finding(
        Check.DEVICE_PLUGIN_MISSING,
        ERROR,
        ObjectRef("Node", "", node.name, node.uid, "v1"),
        f"{where}, and no NVIDIA device plugin DaemonSet was found",
        why,
        "Install the NVIDIA device plugin (or the GPU Operator, or AKS's managed GPU setup) with "
        "tolerations for the spot pool's taints.",
        yaml=header + yaml.safe_dump(manifest, sort_keys=False),
        command="kubectl apply -f fix.yaml",
    )


# ---- our agent ---------------------------------------------------------------------------------


def agent_findings(live: Mapping[str, Pool], daemonsets: Sequence[DaemonSetInfo]) -> list[Finding]:
    """Spot pools that our agent's DaemonSet cannot run on (none when no agent is installed: the
    controller can work from AKS's node-problem-detector alone)."""
    findings = []
    for agent in (ds for ds in daemonsets if is_our_agent(ds)):
        ref = _daemonset_ref(agent)
        for pool in sorted((p for p in live.values() if p.spot), key=lambda p: p.name):
            problems = pool.problems_for(agent.template_spec)
            if not problems:
                continue
            missing = _untolerated(agent.template_spec, pool)
            fix = (
                "Add the pool's taints to the chart value `agent.tolerations` "
                "(values-aks-spot.yaml writes them once, under an anchor) and upgrade the "
                "release; the patch below fixes the running DaemonSet now."
            )
            if not _taints_only(problems):
                fix += " Its `agent.nodeSelector` must also select the pool."
            findings.append(
                Finding(
                    Check.AGENT_NOT_ON_SPOT,
                    ERROR,
                    ref,
                    f"the spot-rebalancer agent cannot run on spot pool {pool.name} "
                    f"({_count(len(pool.nodes), 'node')}): {', '.join(problems)}",
                    "Without the agent there, the controller hears of a Preempt only through "
                    "AKS's node-problem-detector, later or not at all, and nothing acknowledges a "
                    "drained node to Azure: replacements start late and replicas are lost.",
                    fix,
                    yaml=tolerations_patch(agent.template_spec.get("tolerations") or [], missing)
                    if missing
                    else "",
                    command=_patch_command(ref) if missing else "",
                )
            )
    return findings


# ---- managed workloads -----------------------------------------------------------------------


def spot_findings(workloads: Sequence[WorkloadInfo], pools: Mapping[str, Pool]) -> list[Finding]:
    """Managed workloads that no spot pool takes, by taints and node selection (the GPU count is
    the device plugin's check: a pool without advertised GPUs is not the workload's fault)."""
    spot = sorted((p for p in pools.values() if p.spot), key=lambda p: p.name)
    if not spot:
        return []
    findings = []
    for workload in workloads:
        rejected = {pool.name: pool.problems_for(workload.template_spec) for pool in spot}
        if not all(rejected.values()):
            continue
        closest = min(
            spot, key=lambda p: (not _taints_only(rejected[p.name]), len(rejected[p.name]))
        )
        missing = _untolerated(workload.template_spec, closest)
        ref = _workload_ref(workload)
        reasons = "; ".join(f"pool {name}: {', '.join(why)}" for name, why in rejected.items())
        fix = f"Add spot pool {closest.name}'s taints to its pod template's tolerations"
        fix += (
            "."
            if _taints_only(rejected[closest.name])
            else ", and let its nodeSelector or affinity allow the pool."
        )
        findings.append(
            Finding(
                Check.WORKLOAD_NOT_ON_SPOT,
                WARNING,
                ref,
                f"no spot pool takes its replicas: {reasons}",
                "Its replicas run on on-demand capacity only: spot saves nothing on it, and the "
                "controller never returns them to spot.",
                fix + " Where an operator or chart writes the Deployment (KAITO, Dynamo, KServe), "
                "set the tolerations there.",
                yaml=tolerations_patch(workload.template_spec.get("tolerations") or [], missing)
                if missing
                else "",
                command=_patch_command(ref) if missing else "",
            )
        )
    return findings


def _operated(scaler: ScalerInfo) -> tuple[str, str]:
    """Why the spares cannot be held on an HPA an operator owns, and the fix."""
    owner = f"{scaler.owner} (HPA {scaler.name})"
    held = scaler.holder
    if held is not None and held.paused:
        return (
            f"its HPA belongs to {owner}, which is paused: KEDA holds a count of its own",
            "Unpause the ScaledObject, or remove the target.",
        )
    if held is not None:
        return (
            f"its HPA belongs to {owner}, which scales the Deployment to zero when idle "
            "(minReplicaCount 0 or an idleReplicaCount), whatever the HPA's bounds",
            "Set the ScaledObject's minReplicaCount to 1 or more without idleReplicaCount, or "
            "remove the target.",
        )
    if scaler.owner.startswith("ScaledObject "):
        return (
            f"its HPA belongs to {owner}, which the controller cannot read (the keda.sh "
            "ScaledObjects are not listed: the chart's RBAC, or KEDA's CRD), and KEDA sets the "
            "HPA's bounds back at once",
            "Check the controller's ClusterRole and its log.",
        )
    return (
        f"its HPA belongs to {owner}, which sets the HPA's bounds back at once, so no spares "
        "can be held on it",
        "Remove the target; a notice is still failed over.",
    )


def target_findings(setup: Setup) -> list[Finding]:
    """Workloads with an availability target the controller does not act on: it scales a
    Deployment's count (an HPA's: its own wish plus ours, held by the HPA's bounds, which an
    operator that owns the HPA sets back), not a StatefulSet's, and it plans at
    most MAX_TARGET_REPLICAS (the search must not hold up the pass for everyone else)."""
    findings = []
    for workload in setup.workloads:
        policy = in_force(workload.annotations).policy
        if policy is None or not policy.target:
            continue
        if workload.kind != "Deployment":
            what = "a StatefulSet: its replicas keep their names and volumes, we do not add any"
            fix = "Remove the target; a StatefulSet's replicas are failed over at a notice."
        elif (workload.namespace, workload.name) in setup.operated:
            what, fix = setup.operated[(workload.namespace, workload.name)]
        elif workload.replicas > MAX_TARGET_REPLICAS:
            what = f"{workload.replicas} replicas: a target plans at most {MAX_TARGET_REPLICAS}"
            fix = "Split the workload, or use spare-replicas instead of a target."
        else:
            continue
        findings.append(
            Finding(
                Check.TARGET_NOT_ACTED_ON,
                WARNING,
                _workload_ref(workload),
                f"availability target {policy.target} % not acted on: {what}",
                "No spares and no on-demand fallback are kept for it before a notice.",
                fix,
            )
        )
    return findings


def fallback_findings(setup: Setup, live: Mapping[str, Pool]) -> list[Finding]:
    """Managed workloads that no on-demand pool, live, declared or a NodePool's part, takes."""
    pools = with_declared(live, offline_pools(setup, live))
    findings = []
    for workload in setup.workloads:
        fallback = on_demand_fallback(workload.template_spec, pools, gpus=workload.gpus_per_replica)
        if fallback.pools:
            continue
        ref = _workload_ref(workload)
        # The on-demand pools it could use: with the GPUs it asks for (a CPU pool is no home for
        # a GPU replica, whatever its taints).
        sized = {
            name: why
            for name, why in fallback.rejected.items()
            if pools[name].gpus_per_node >= workload.gpus_per_replica
        }
        taint_only = sorted(name for name, why in sized.items() if _taints_only(why))
        yaml_text, command = "", ""
        if taint_only:
            closest = pools[taint_only[0]]
            missing = _untolerated(workload.template_spec, closest)
            fix = f"Add on-demand pool {closest.name}'s taints to its pod template's tolerations."
            yaml_text = tolerations_patch(workload.template_spec.get("tolerations") or [], missing)
            command = _patch_command(ref)
        elif not sized:
            fix = (
                "Give it an on-demand pool with its GPUs (autoscaled from 0 is fine) and, while "
                "that pool has no Node, declare it in the chart value `controller.pools`."
            )
            yaml_text = pool_declaration(_zero_pool_name(setup, live), workload.gpus_per_replica)
            command = setup.helm_upgrade
        else:
            fix = "Let one on-demand pool take it: its nodeSelector or node affinity."
        findings.append(
            Finding(
                Check.NO_ON_DEMAND_FALLBACK,
                ERROR,
                ref,
                f"no on-demand pool can take its replicas: {fallback.blocked_reason}",
                "When a spot node is preempted, its replacements can only go to other spot "
                "nodes, which the same wave may take; each notice reports "
                "SpotRebalancerFailoverBlocked.",
                fix,
                yaml=yaml_text,
                command=command,
            )
        )
    return findings


# ---- KAITO Workspaces ------------------------------------------------------------------------

AKS_SPOT_TAINT = Taint(names.AKS_SPOT_LABEL, "spot", "NoSchedule")


def spot_gpu_capacity(setup: Setup, live: Mapping[str, Pool]) -> list[Pool]:
    """The spot capacity a GPU replica could use: VMSS spot pools with GPU nodes and the spot
    parts of GPU NodePools, live, declared or read from a NodePool (NAP keeps no idle node)."""
    by_name = {node.name: node for node in setup.nodes}
    gpu_parts = {np.pool(pool_kind.SPOT) for np in setup.nodepools or () if np.gpu}
    pools = with_declared(live, offline_pools(setup, live))
    return sorted(
        (
            pool
            for pool in pools.values()
            if pool.spot
            and (
                pool.gpus_per_node > 0
                or pool.name in gpu_parts
                or any(is_gpu_node(by_name[n]) for n in pool.nodes if n in by_name)
            )
        ),
        key=lambda p: p.name,
    )


def workspace_findings(setup: Setup, live: Mapping[str, Pool]) -> list[Finding]:
    """KAITO Workspaces whose workload's pod template tolerates the taints of no spot GPU
    capacity: KAITO's pods never run on spot. Judged from the workload KAITO made (what its pods
    get), taints only: KAITO's node affinity is its own label selector, which its provisioner
    matches. A Workspace KAITO has not made a workload for yet is not judged."""
    spot = spot_gpu_capacity(setup, live)
    if not spot:
        return []
    findings = []
    for workspace in sorted(setup.workspaces or (), key=lambda w: w.key):
        workload = workload_of(workspace, setup.kaito_workloads)
        if workload is None:
            continue
        tolerations = workload.template_spec.get("tolerations") or []
        missing_by_pool = {pool.name: untolerated(tolerations, pool.taints) for pool in spot}
        if not all(missing_by_pool.values()):
            continue
        closest = min(spot, key=lambda p: (len(missing_by_pool[p.name]), p.name))
        missing = missing_by_pool[closest.name]
        reasons = "; ".join(
            f"{name}: {', '.join(str(t) for t in taints)}"
            for name, taints in missing_by_pool.items()
        )
        ref = ObjectRef(
            "Workspace", workspace.namespace, workspace.name, workspace.uid, KAITO_API_VERSION
        )
        fix_yaml, fix, command = (
            _template_workspace_fix(workspace, workload, missing)
            if workspace.template
            else _preset_workspace_fix(workload, missing)
        )
        findings.append(
            Finding(
                Check.WORKSPACE_NOT_ON_SPOT,
                WARNING,
                ref,
                f"the pods of its {workload.kind} {workload.namespace}/{workload.name} tolerate no "
                f"spot GPU capacity's taints (not tolerated: {reasons})",
                "KAITO's inference replicas run on on-demand GPUs only: spot saves nothing on "
                "them, and the controller never places or returns them there.",
                f"Add spot capacity {closest.name}'s taints to the pods' tolerations. " + fix,
                yaml=fix_yaml,
                command=command,
            )
        )
    return findings


def _template_workspace_fix(
    workspace: WorkspaceInfo, workload: WorkloadInfo, missing: Sequence[Taint]
) -> tuple[str, str, str]:
    """A merge patch of the Workspace's `inference.template` tolerations (what a StatefulSet KAITO
    makes again gets), and the same tolerations on the running workload, which KAITO does not
    update from a changed template."""
    kept = [dict(t) for t in workspace.template_tolerations]
    document = {
        "inference": {
            "template": {
                "spec": {"tolerations": kept + [toleration_for(t) for t in missing]},
            }
        }
    }
    header = (
        f"# Workspace {workspace.name}'s inference.template tolerations, the whole list "
        f"({len(kept)} kept): a merge patch replaces it.\n"
        "# KAITO adds its own after these when it makes the StatefulSet.\n"
    )
    running = [dict(t) for t in workload.template_spec.get("tolerations") or []]
    running += [toleration_for(t) for t in missing if toleration_for(t) not in running]
    now = json.dumps(
        {"spec": {"template": {"spec": {"tolerations": running}}}}, separators=(",", ":")
    )
    kind = workload.kind.lower()
    command = (
        f"kubectl -n {workspace.namespace} patch workspace {workspace.name} --type merge "
        f"--patch-file fix.yaml && kubectl -n {workload.namespace} patch {kind} "
        f"{workload.name} --type merge -p '{now}'"
    )
    fix = (
        "Set them in the Workspace's inference.template; KAITO does not carry a changed "
        f"template to the {workload.kind} it already made, so the command patches that too (its "
        "pods restart one at a time)."
    )
    return header + yaml.safe_dump(document, sort_keys=False), fix, command


def _preset_workspace_fix(workload: WorkloadInfo, missing: Sequence[Taint]) -> tuple[str, str, str]:
    """A preset Workspace has no field for tolerations: KAITO sets them. The workload's own
    patch holds until KAITO replaces its pod template (a base-image upgrade)."""
    if set(missing) <= {AKS_SPOT_TAINT}:
        cause = (
            f"KAITO {SPOT_TOLERATION_SINCE} and later add the AKS spot toleration themselves on "
            "Azure (its chart's cloudProviderName: azure, the default): upgrade KAITO, or set it "
            "to azure, so that what it makes next has it."
        )
    else:
        cause = (
            f"Taint the spot capacity with {AKS_SPOT_TAINT} instead (KAITO tolerates only "
            f"nvidia.com/gpu, sku=gpu and, on Azure from {SPOT_TOLERATION_SINCE}, that one), or "
            "keep this patch."
        )
    fix = (
        f"A preset Workspace's pod tolerations are KAITO's own: patch its {workload.kind} (KAITO "
        f"keeps the patch until a base-image upgrade replaces the pod template). {cause}"
    )
    existing = workload.template_spec.get("tolerations") or []
    return tolerations_patch(existing, missing), fix, _patch_command(_workload_ref(workload))


# ---- pools the cluster autoscaler keeps at zero ------------------------------------------------


def _zero_pools(setup: Setup, live: Mapping[str, Pool]) -> list[NodeGroup]:
    return sorted(
        (
            group
            for group in setup.node_groups or ()
            if group.pool
            and group.registered == 0
            and group.max_size > 0
            and group.pool not in live
            and group.pool not in setup.declared_pools
            and group.pool not in setup.spot_pools_seen
        ),
        key=lambda g: g.pool,
    )


def _zero_pool_name(setup: Setup, live: Mapping[str, Pool]) -> str:
    zero = _zero_pools(setup, live)
    return zero[0].pool if len(zero) == 1 else ""


def pool_declaration(pool: str, gpus: int) -> str:
    """The chart values that declare a pool as its nodes will look (`controller.pools`)."""
    name = pool or "<your on-demand GPU pool>"
    return (
        "# Values of the spot-rebalancer release: the pool as its Nodes will look. Its taints:\n"
        f"#   az aks nodepool show -g <group> --cluster-name <cluster> -n {name} "
        "--query nodeTaints\n"
        "controller:\n"
        "  pools:\n"
        f"    - name: {name}\n"
        "      spot: false\n"
        f"      gpus: {max(1, gpus)}                # nvidia.com/gpu per node of its VM size\n"
        "      labels: {}             # labels you gave the pool, if workloads select them\n"
        '      taints: ["sku=gpu:NoSchedule"]   # the taints you gave the pool\n'
    )


def undeclared_pool_findings(
    setup: Setup, live: Mapping[str, Pool], no_fallback: Sequence[Finding]
) -> list[Finding]:
    """Pools the autoscaler keeps at zero that the settings do not declare, reported when some
    workload has no on-demand fallback (the pool may be what it needs)."""
    stuck = ", ".join(sorted(str(f.object) for f in no_fallback))
    gpus = max((w.gpus_per_replica for w in setup.workloads), default=1)
    return [
        Finding(
            Check.POOL_AT_ZERO_UNDECLARED,
            WARNING,
            ObjectRef("NodePool", "", group.pool),
            f"pool {group.pool} is autoscaled (min {group.min_size}, max {group.max_size}) and has "
            "no Node now; the controller's settings do not declare it",
            "A pool without Nodes shows the controller neither its taints nor its labels, so it "
            f"is left out of the fail-over check: {stuck} has no on-demand fallback. If "
            f"{group.pool} is an on-demand pool, declaring it lets the surge fail over to it and "
            "the autoscaler bring up its Node.",
            "Declare it in the chart value `controller.pools`, as its Nodes will look.",
            yaml=pool_declaration(group.pool, gpus),
            command=setup.helm_upgrade,
        )
        for group in _zero_pools(setup, live)
    ]


def node_groups_from_status(text: str) -> list[NodeGroup] | None:
    """The node groups in the cluster autoscaler's status ConfigMap (`kube-system/
    cluster-autoscaler-status`, key `status`): the YAML of cluster-autoscaler 1.30 and later
    (`nodeGroups: [{name, health: {nodeCounts: {registered: {total}}, minSize, maxSize}}]`).
    None when the text is not that YAML (older autoscalers write free text)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("nodeGroups"), list):
        return None
    groups = []
    for item in data["nodeGroups"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        health = _object(item, "health")
        registered = _object(_object(health, "nodeCounts"), "registered")
        match = AKS_NODE_GROUP.match(item["name"])
        groups.append(
            NodeGroup(
                name=item["name"],
                pool=match["pool"] if match else "",
                min_size=_int(health.get("minSize")),
                max_size=_int(health.get("maxSize")),
                registered=_int(registered.get("total")),
            )
        )
    return groups


def _object(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# ---- Karpenter NodePools (AKS node auto-provisioning) --------------------------------------------


def _nodepool_ref(nodepool: NodePoolInfo) -> ObjectRef:
    return ObjectRef("NodePool", "", nodepool.name, nodepool.uid, "karpenter.sh/v1")


def _gpu_nodepools(setup: Setup, live: Mapping[str, Pool]) -> list[NodePoolInfo]:
    """NodePools that make GPU nodes: by their requirements, or by the nodes they have now (one
    being deleted, or not Ready, launches none)."""
    gpu_pools = {p.name for p in live.values() if p.gpus_per_node > 0}
    return sorted(
        (
            np
            for np in setup.nodepools or ()
            if np.launches and (np.gpu or any(np.pool(c) in gpu_pools for c in np.capacity_types))
        ),
        key=lambda np: np.name,
    )


def spot_only_nodepool_findings(setup: Setup, live: Mapping[str, Pool]) -> list[Finding]:
    """GPU NodePools that may launch spot only, while no pool offers on-demand GPUs: no VMSS
    pool (live or declared), no NodePool allowing on-demand with GPUs, no declared on-demand
    part of a NodePool. Karpenter then has nowhere to put a preempted replica but spot again."""
    gpu = _gpu_nodepools(setup, live)
    pools = with_declared(live, offline_pools(setup, live))
    on_demand = [p.name for p in pools.values() if not p.spot and p.gpus_per_node > 0]
    on_demand += [
        np.pool(pool_kind.ON_DEMAND) for np in gpu if pool_kind.ON_DEMAND in np.capacity_types
    ]
    if on_demand:
        return []
    findings = []
    for nodepool in (np for np in gpu if np.spot_only):
        ref = _nodepool_ref(nodepool)
        document = {"spec": {"template": {"spec": {"requirements": spot_only_patch(nodepool)}}}}
        header = (
            f"# NodePool {nodepool.name}'s whole requirements list (a merge patch replaces it): "
            "every requirement kept, on-demand allowed beside spot.\n"
            "# Karpenter still launches spot while spot is offered (NAP prefers it); a pod that "
            "requires on-demand gets it.\n"
        )
        findings.append(
            Finding(
                Check.NODEPOOL_SPOT_ONLY,
                ERROR,
                ref,
                f"GPU NodePool {nodepool.name} may launch spot only "
                f"({names.KARPENTER_CAPACITY_TYPE_LABEL} {list(nodepool.capacity_types)}), and "
                "no pool or NodePool offers on-demand GPUs",
                "When its spot nodes are preempted, their replacements can only go to spot again, "
                "which the same wave may take, and a spot shortage leaves them Pending: every "
                "notice reports SpotRebalancerFailoverBlocked.",
                "Allow on-demand in the NodePool (or add an on-demand GPU NodePool): the "
                f"controller reads its on-demand part `{nodepool.pool(pool_kind.ON_DEMAND)}` "
                "from the NodePool, no declaration needed.",
                yaml=header + yaml.safe_dump(document, sort_keys=False),
                command=f"kubectl patch nodepool {nodepool.name} --type merge "
                "--patch-file fix.yaml",
            )
        )
    return findings


def empty_nodes_kept_findings(setup: Setup, live: Mapping[str, Pool]) -> list[Finding]:
    """GPU NodePools that may launch on-demand (fail-over targets) whose empty nodes Karpenter
    never removes (`consolidateAfter: Never`, or an always-active budget of 0 nodes covering
    Empty), while the controller manages workloads: every fail-over and scale-back that empties
    an on-demand GPU node leaves it paid for, idle, until it expires. The NAP counterpart of
    `idle_fallback_findings`, read from the NodePool instead of judged from evidence."""
    if not setup.workloads:
        return []
    findings = []
    for nodepool in _gpu_nodepools(setup, live):
        why = nodepool.disruption.keeps_empty_nodes()
        if pool_kind.ON_DEMAND not in nodepool.capacity_types or not why:
            continue
        document = {"spec": {"disruption": nodepool.disruption.letting_empty_nodes_go()}}
        header = (
            f"# NodePool {nodepool.name}'s disruption settings that let Karpenter remove its empty "
            "nodes (a merge patch replaces the budgets list: every other budget kept).\n"
            "# Underused nodes stay as they were: a blocked reason other than Empty stays "
            f"blocked; consolidation turned back on is for empty nodes only (WhenEmpty), after "
            f"{EMPTY_NODE_GRACE}.\n"
        )
        findings.append(
            Finding(
                Check.NODEPOOL_KEEPS_EMPTY_NODES,
                WARNING,
                _nodepool_ref(nodepool),
                f"GPU NodePool {nodepool.name} may launch on-demand nodes, and Karpenter never "
                f"removes its empty nodes ({'; '.join(why)})",
                "An on-demand GPU node emptied when a replica returns to spot or a surge scales "
                "back stays, paid for and idle, until it expires (expireAfter, 720h by default): "
                "the return to spot saves nothing. Budgets and consolidateAfter limit only "
                "Karpenter's own disruption; spares and replacements are kept from it by "
                "karpenter.sh/do-not-disrupt on their pods, not by the NodePool.",
                "Let Karpenter remove empty nodes: consolidation for empty nodes on, and Empty "
                "out of the budgets that allow no node.",
                yaml=header + yaml.safe_dump(document, sort_keys=False),
                command=f"kubectl patch nodepool {nodepool.name} --type merge "
                "--patch-file fix.yaml",
            )
        )
    return findings


def nodepool_device_plugin_findings(
    nodepools: Sequence[NodePoolInfo], daemonsets: Sequence[DaemonSetInfo]
) -> list[Finding]:
    """GPU NodePools that may launch spot, whose taints every device plugin leaves untolerated:
    their spot nodes will advertise no GPUs. Taints only: a NodePool's taints are certain to be on
    its nodes, while the labels a device plugin selects may come from the node image."""
    plugins = [ds for ds in daemonsets if is_device_plugin(ds)]
    findings: list[Finding] = []
    for nodepool in sorted(nodepools, key=lambda np: np.name):
        if not nodepool.gpu or pool_kind.SPOT not in nodepool.capacity_types:
            continue
        missing_by_plugin = {
            ds.name: untolerated(ds.template_spec.get("tolerations") or [], nodepool.taints)
            for ds in plugins
        }
        if not plugins or not all(missing_by_plugin.values()):
            continue
        for plugin in plugins:
            ref = _daemonset_ref(plugin)
            missing = missing_by_plugin[plugin.name]
            findings.append(
                Finding(
                    Check.DEVICE_PLUGIN_NOT_ON_SPOT,
                    ERROR,
                    ref,
                    f"spot GPU NodePool {nodepool.name}: the device plugin {ref} does not "
                    f"tolerate its taints ({', '.join(str(t) for t in missing)})",
                    "The spot nodes it launches will advertise no nvidia.com/gpu, so GPU pods "
                    "cannot run there: Karpenter keeps launching nodes they do not fit, and "
                    "replicas land on on-demand or stay Pending.",
                    "Add the NodePool's taints to its pod template's tolerations."
                    + _helm_note(plugin.helm_release),
                    yaml=tolerations_patch(plugin.template_spec.get("tolerations") or [], missing),
                    command=_patch_command(ref),
                )
            )
    return findings


def undeclared_nodepool_findings(
    setup: Setup, live: Mapping[str, Pool], no_fallback: Sequence[Finding]
) -> list[Finding]:
    """GPU NodePools that may launch on-demand, whose on-demand part has no node, is not declared,
    and whose GPUs per node the controller cannot tell (no size it names is in Azure's size table,
    `azure/gpu_sizes.py`, no `sku-gpu-count` requirement, no node of the NodePool showing them),
    reported when some workload has no on-demand fallback. The
    controller reads the rest of the part from the NodePool (its taints, labels, zone), but a part
    of unknown GPUs takes no GPU replica, so the fail-over is blocked although Karpenter could
    launch the capacity (the NAP counterpart of `undeclared_pool_findings`)."""
    stuck = ", ".join(sorted(str(f.object) for f in no_fallback))
    parts = nodepool_pools(setup.nodepools or (), live)
    findings = []
    for nodepool in _gpu_nodepools(setup, live):
        part = nodepool.pool(pool_kind.ON_DEMAND)
        if part not in parts or part in live or part in setup.declared_pools:
            continue
        if parts[part].gpus_per_node > 0:
            continue
        declaration = {
            "controller": {
                "pools": [
                    {
                        "name": part,
                        "gpus": _gpus_of(nodepool),
                        "taints": [str(t) for t in nodepool.taints],
                    }
                ]
            }
        }
        header = (
            f"# Values of the spot-rebalancer release: NodePool {nodepool.name}'s on-demand part "
            "as its nodes will look (its taints; gpus: nvidia.com/gpu per node of its size).\n"
            f"# Or name the count in the NodePool's requirements ({GPU_COUNT_KEY} In [<n>]), "
            "if every size it allows has it.\n"
        )
        findings.append(
            Finding(
                Check.POOL_AT_ZERO_UNDECLARED,
                WARNING,
                _nodepool_ref(nodepool),
                f"NodePool {nodepool.name} may launch on-demand GPU nodes but has none now, and "
                "neither its requirements nor its nodes say how many GPUs a node has; the "
                f"controller's settings do not declare {part}",
                "The controller reads the NodePool's on-demand part from the NodePool, but a part "
                f"of unknown GPUs takes no GPU replica: {stuck} has no on-demand fallback, "
                "although Karpenter would launch one for a replacement that requires it.",
                f"Declare {part} in the chart value `controller.pools` with its GPUs per node "
                f"(or require {GPU_COUNT_KEY} in the NodePool).",
                yaml=header + yaml.safe_dump(declaration, sort_keys=False),
                command=setup.helm_upgrade,
            )
        )
    return findings


def _gpus_of(nodepool: NodePoolInfo) -> int:
    """nvidia.com/gpu per node to declare: the NodePool's count if it names one, else 1."""
    return nodepool.gpus or 1


# ---- on-demand fallback nodes kept empty -------------------------------------------------------

AKS_PROFILE_COMMAND = (
    "az aks update -g <group> -n <cluster> --cluster-autoscaler-profile "
    "scale-down-unneeded-time=3m scale-down-delay-after-add=5m"
)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def idle_fallback_findings(spells: Sequence[IdleSpell], *, limit_seconds: float) -> list[Finding]:
    """On-demand pools whose GPU nodes stayed empty longer than `limit_seconds` after their GPU
    pods left before they were removed: what the cluster autoscaler's scale-down settings cost
    each fail-over. Judged from the spells the controller saw, never from the settings, which
    AKS does not show in the cluster."""
    by_pool: dict[str, list[IdleSpell]] = {}
    for spell in spells:
        by_pool.setdefault(spell.pool, []).append(spell)
    findings = []
    for pool, members in sorted(by_pool.items()):
        long = [s for s in members if s.seconds > limit_seconds]
        if not long:
            continue
        longest = max(s.seconds for s in long)
        idle_hours = sum(s.seconds for s in members) / 3600
        findings.append(
            Finding(
                Check.FALLBACK_KEPT_IDLE,
                WARNING,
                ObjectRef("NodePool", "", pool),
                f"on-demand pool {pool}: {_count(len(long), 'GPU node')} of {len(members)} "
                f"removed lately stayed empty over {_minutes(limit_seconds)} after their GPU "
                f"pods left (longest at least {_minutes(longest)}; {idle_hours:.2f} node-hours "
                "empty in all)",
                "An empty on-demand GPU node is paid at the on-demand price until the cluster "
                "autoscaler removes it: every fail-over pays that tail after its replica went "
                "back to spot. AKS's defaults keep it at least 10 min (scale-down-unneeded-time) "
                "and no scale-down at all within 10 min of any scale-up "
                "(scale-down-delay-after-add).",
                "Shorten the cluster autoscaler profile's scale-down-unneeded-time and "
                "scale-down-delay-after-add (cluster-wide settings: they apply to every pool). "
                "What each costs: docs/cost.md, 'Node lifecycle'.",
                command=AKS_PROFILE_COMMAND,
            )
        )
    return findings
