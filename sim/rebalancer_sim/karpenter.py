"""A Karpenter stand-in (AKS node auto-provisioning): `karpenter.sh/v1` NodePools launch
NodeClaims and their Nodes for pods nothing else can take, and remove empty nodes.

Launch: each pod the scheduler marked `Unschedulable` that fits no node already on its way is
given a NodeClaim of the first NodePool (by name; `weight` is not read) whose template admits it:
its taints tolerated, the pod's node selector and required node affinity met by the labels the
node will have (`karpenter.sh/nodepool`, `karpenter.sh/capacity-type`, the zone, the size, the
template's labels), its requests within the size. Of the capacity types the NodePool's
`karpenter.sh/capacity-type` requirement allows (on-demand without one, Karpenter's default),
spot is taken first while the NodePool has spot capacity left (NAP launches the cheaper
offering), then on-demand; zones in the order the requirement lists them. The VM comes from the
emulated cloud, so it has an IMDS endpoint and a Preempt takes it as any spot VM's; its Node is
labelled as karpenter-provider-azure labels one (`karpenter.sh/nodepool`, `karpenter.sh/
capacity-type`, `kubernetes.azure.com/scalesetpriority` spot or regular, the zone, the instance
type, `karpenter.azure.com/sku-name` and `sku-gpu-count`) and gets the NodePool's taints only
(no spot taint of Karpenter's own). A NodeClaim whose VM is gone (preempted) is deleted.

Sizes: a NodePool launches the first size its `node.kubernetes.io/instance-type` `In`
requirement names that the emulator knows (`SizeSpec`: the scenario's NodePools and pools say
what each has); a NodePool naming none it knows launches nothing.

Consolidation: a node of a NodePool whose `spec.disruption.consolidateAfter` is not `Never`,
with no workload pod (DaemonSet pods do not count) for that long, and no pod (nor the node)
annotated `karpenter.sh/do-not-disrupt: "true"`, is removed with its NodeClaim.

Disruption (drift, underused consolidation, expiry), when a test asks for it (`disrupt`), as
Karpenter v1.15's disruption queue and termination controller carry out a delete-only command
(pkg/controllers/disruption/queue.go, node/termination): the node is tainted
`karpenter.sh/disrupted:NoSchedule` at once, then drained through the Eviction API after
`DRAIN_AFTER_SECONDS` and every `DRAIN_RETRY_SECONDS` while anything is refused
(PodDisruptionBudgets apply; a pod annotated do-not-disrupt `"true"` is left, as Karpenter
leaves it until a `terminationGracePeriod`), and its NodeClaim and VM deleted once no workload
pod is left. `evicted` lists what it evicted, `refused` what a budget refused.

Not modelled: batching windows (a pod is provisioned for at the next loop), bin-packing several
pending pods by price across sizes, `limits`, `weight`, disruption budgets, drift, expiry,
consolidation of under-used nodes (moving pods), `startupTaints`, NodeClaim launch failures and
the AKS machine API's node names (a NodeClaim's node is named as a VM scale set instance of a
stand-in scale set per NodePool, capacity type and zone, whose name is its agentpool label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.cloud import Cloud, Vm
from rebalancer_sim.disruption import evict
from rebalancer_sim.objects import Obj, is_terminating, pod_phase, pod_requests
from rebalancer_sim.pools import PoolSpec, is_workload_pod, pod_fits_pool, template_node
from rebalancer_sim.scheduler import Scheduler
from rebalancer_sim.scheduling import allocatable, insufficient, parse_taint
from rebalancer_sim.status import ApiError
from rebalancer_sim.store import format_time, random_suffix

NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_COUNT_LABEL = "karpenter.azure.com/sku-gpu-count"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SPOT, ON_DEMAND = "spot", "on-demand"
# Emulator-only knobs a scenario writes on its NodePools (a real NodePool has neither).
PROVISIONING_ANNOTATION = "sim.spot-rebalancer.io/provisioning-seconds"
SPOT_CAPACITY_ANNOTATION = "sim.spot-rebalancer.io/spot-capacity"
DEFAULT_PROVISIONING_SECONDS = 30.0
DISRUPTED_TAINT = "karpenter.sh/disrupted"
# From the taint to the first eviction: the queue deletes a delete-only command's NodeClaim on
# its next reconcile, and the termination controller drains at once.
DRAIN_AFTER_SECONDS = 1.0
DRAIN_RETRY_SECONDS = 1.0  # the termination controller requeues a drain refused by a PDB after 1 s
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")


@dataclass(frozen=True)
class SizeSpec:
    """An Azure VM size as the emulator launches it."""

    name: str
    cpu: float
    memory: str
    gpus: int = 0
    max_pods: int = 110
    price_per_hour: float = 0.0
    spot_price_per_hour: float | None = None


@dataclass
class NodePoolSpec:
    """A NodePool as a scenario declares it (scenario.py `nodePools`): the NodePool object made
    from it, and the size it launches."""

    name: str
    size: SizeSpec
    capacity_types: list[str] = field(default_factory=lambda: [ON_DEMAND])
    zones: list[str] = field(default_factory=lambda: ["1"])
    taints: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    consolidate_after: str = "Never"
    provisioning_seconds: float = DEFAULT_PROVISIONING_SECONDS
    spot_capacity: int | None = None  # spot VMs Azure can give this NodePool now; None: unlimited

    def manifest(self, region: str) -> Obj:
        requirements: list[Obj] = [
            {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": list(self.capacity_types)},
            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [self.size.name]},
            {"key": ZONE_LABEL, "operator": "In",
             "values": [z if "-" in z else f"{region}-{z}" for z in self.zones]},
        ]  # fmt: skip
        if self.size.gpus:
            requirements.append(
                {"key": GPU_COUNT_LABEL, "operator": "In", "values": [str(self.size.gpus)]}
            )
        annotations = {PROVISIONING_ANNOTATION: f"{self.provisioning_seconds:g}"}
        if self.spot_capacity is not None:
            annotations[SPOT_CAPACITY_ANNOTATION] = str(self.spot_capacity)
        return {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": self.name, "annotations": annotations},
            "spec": {
                "template": {
                    "metadata": {"labels": dict(self.labels)},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass",
                                         "name": "default"},
                        "requirements": requirements,
                        "taints": [parse_taint(t) for t in self.taints],
                    },
                },
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                               "consolidateAfter": self.consolidate_after},
            },
            # Karpenter's Ready: its node class resolved (a NodePool not Ready launches nothing).
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                       "message": "",
                                       "lastTransitionTime": "1970-01-01T00:00:00Z"}]},
        }  # fmt: skip


@dataclass
class ClaimShape(PoolSpec):
    """The stand-in scale set of one NodePool's capacity type in one zone: a node of it looks as
    karpenter-provider-azure makes one. Its taints are the NodePool's alone."""

    nodepool: str = ""
    capacity_type: str = ON_DEMAND
    taint_objects: list[Obj] = field(default_factory=list)

    def all_taints(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self.taint_objects]


def seconds(duration: object) -> float | None:
    """A Karpenter duration (`30s`, `1m`, `1h30m`) in seconds; None for `Never` or nonsense."""
    match = _DURATION.match(str(duration))
    if not match or not any(match.groups()):
        return None
    hours, minutes, secs = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(secs or 0)


def _requirement(nodepool: Obj, key: str) -> list[str] | None:
    """The values an `In` requirement on `key` allows; None without one."""
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    for requirement in spec.get("requirements") or []:
        if requirement.get("key") == key and requirement.get("operator") == "In":
            return [str(v) for v in requirement.get("values") or []]
    return None


class Karpenter:
    def __init__(self, cloud: Cloud, scheduler: Scheduler, sizes: dict[str, SizeSpec]) -> None:
        self.cloud = cloud
        self.store = cloud.store
        self.scheduler = scheduler
        self.sizes = sizes
        self._shapes: dict[str, ClaimShape] = {}  # by stand-in scale set name
        self._templates: dict[str, Obj] = {}
        self._claims: dict[str, str] = {}  # NodeClaim name -> its node's name
        self._empty_since: dict[str, float] = {}
        self.launched: list[tuple[str, str, str]] = []  # (NodeClaim, NodePool, capacity type)
        self.consolidated: list[str] = []  # node names removed as empty
        self._disrupting: dict[str, float] = {}  # node name -> when its drain may try next
        self.evicted: list[tuple[float, str]] = []  # (time, pod name) evicted by a drain
        self.refused: list[tuple[float, str]] = []  # (time, pod name) a budget refused

    def reconcile(self) -> int:
        return (
            self._launch() + self._register() + self._forget_lost() + self._consolidate()
            + self._drain_disrupted()
        )  # fmt: skip

    # ---- shapes --------------------------------------------------------------------------------

    def _shape(self, nodepool: Obj, capacity_type: str, zone: str) -> ClaimShape | None:
        size = next(
            (self.sizes[s] for s in _requirement(nodepool, INSTANCE_TYPE_LABEL) or []
             if s in self.sizes),
            None,
        )  # fmt: skip
        if size is None:
            return None
        name = nodepool["metadata"]["name"]
        key = f"{name}-{'spot' if capacity_type == SPOT else 'od'}-{zone.rsplit('-', 1)[-1]}"
        template = (nodepool.get("spec") or {}).get("template") or {}
        spec = template.get("spec") or {}
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            NODEPOOL_LABEL: name,
            CAPACITY_TYPE_LABEL: capacity_type,
            "kubernetes.azure.com/scalesetpriority": "spot" if capacity_type == SPOT else "regular",
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true",
            "karpenter.azure.com/sku-name": size.name,
        }
        if size.gpus:
            labels[GPU_COUNT_LABEL] = str(size.gpus)
        shape = ClaimShape(
            name=key,
            vm_size=size.name,
            priority="spot" if capacity_type == SPOT else "regular",
            zones=[zone],
            cpu=size.cpu,
            memory=size.memory,
            gpus=size.gpus,
            max_pods=size.max_pods,
            count=0,
            price_per_hour=size.price_per_hour,
            spot_price_per_hour=size.spot_price_per_hour,
            provisioning_seconds=float(
                ((nodepool["metadata"].get("annotations") or {}).get(PROVISIONING_ANNOTATION))
                or DEFAULT_PROVISIONING_SECONDS
            ),
            labels={str(k): str(v) for k, v in labels.items()},
            gpu_taint=False,
            nodepool=name,
            capacity_type=capacity_type,
            taint_objects=[dict(t) for t in spec.get("taints") or []],
        )
        known = self._shapes.get(key)
        if known is None or known != shape:  # a NodePool changed: its new nodes look new
            self._shapes[key] = shape
            self._templates[key] = template_node(shape, self.cloud.cluster)
            self.cloud.add_pool(shape)
        return self._shapes[key]

    def _parts(self, nodepool: Obj) -> list[ClaimShape]:
        """What the NodePool may launch, in the order it is tried: spot first (with capacity
        left), then on-demand; zones as listed."""
        allowed = _requirement(nodepool, CAPACITY_TYPE_LABEL) or [ON_DEMAND]
        zones = _requirement(nodepool, ZONE_LABEL) or [f"{self.cloud.cluster.region}-1"]
        parts = []
        for capacity_type in (SPOT, ON_DEMAND):
            if capacity_type not in allowed:
                continue
            if capacity_type == SPOT and not self._spot_left(nodepool):
                continue
            for zone in zones:
                shape = self._shape(nodepool, capacity_type, zone)
                if shape is not None:
                    parts.append(shape)
        return parts

    def _spot_left(self, nodepool: Obj) -> bool:
        text = (nodepool["metadata"].get("annotations") or {}).get(SPOT_CAPACITY_ANNOTATION)
        if text is None or not text.isdigit():
            return True
        name = nodepool["metadata"]["name"]
        spot_vms = sum(
            len(self.cloud.pool_vms(s.name))
            for s in self._shapes.values()
            if s.nodepool == name and s.capacity_type == SPOT
        )
        return spot_vms < int(text)

    # ---- launch -----------------------------------------------------------------------------

    def _unschedulable(self) -> list[Obj]:
        pods = []
        for key in self.scheduler.pending_keys():
            pod = self.store.get(R.PODS, *key)
            if pod is None or is_terminating(pod) or pod["spec"].get("nodeName"):
                continue
            if any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in pod.get("status", {}).get("conditions") or []
            ):
                pods.append(pod)
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))

    def _launch(self) -> int:
        pods = self._unschedulable()
        if not pods:
            return 0
        nodepools = sorted(
            (np for np in self.store.items(R.NODEPOOLS) if not is_terminating(np)),
            key=lambda np: np["metadata"]["name"],
        )
        # Room on the way, and on NodeClaims' nodes the scheduler has not retried the pod on yet
        # (it runs first, but may lag): taken before a new NodeClaim is made.
        coming: dict[str, dict[str, float]] = {}
        for vm in self._claim_vms():
            free = self._room(vm)
            if free is not None:
                coming[vm.node_name] = free
        launched = 0
        for pod in pods:
            requests = pod_requests(pod)
            room = next(
                (
                    free
                    for name, free in coming.items()
                    if not insufficient(requests, free)
                    and pod_fits_pool(pod, self.cloud.vms[name].pool, self._template_of(name))
                ),
                None,
            )
            if room is None:
                part = next(
                    (
                        shape
                        for nodepool in nodepools
                        for shape in self._parts(nodepool)
                        if pod_fits_pool(pod, shape, self._templates[shape.name])
                    ),
                    None,
                )
                if part is None:
                    continue
                vm = self._create_claim(part)
                room = coming[vm.node_name] = allocatable(self._templates[part.name])
                launched += 1
            for resource, amount in requests.items():
                room[resource] = room.get(resource, 0.0) - amount
        return launched

    def _room(self, vm: Vm) -> dict[str, float] | None:
        """What a NodeClaim's VM can still take: all of it while provisioning; a schedulable
        node what its pods leave; None when nothing can go there."""
        if vm.state == "provisioning":
            return allocatable(self._templates[vm.pool.name])
        node = self.store.get(R.NODES, "", vm.node_name)
        if vm.state != "running" or node is None or node["spec"].get("unschedulable"):
            return None
        if is_terminating(node) or (node["spec"].get("taints") or []) != (
            self._templates[vm.pool.name]["spec"].get("taints") or []
        ):
            return None  # a taint its NodePool does not give (a drain's, an eviction's)
        free = allocatable(node)
        for name, amount in self.scheduler.used_on(vm.node_name).items():
            free[name] = free.get(name, 0.0) - amount
        return free

    def _template_of(self, node_name: str) -> Obj:
        return self._templates[self.cloud.vms[node_name].pool.name]

    def _claim_vms(self) -> list[Vm]:
        return [self.cloud.vms[n] for n in self._claims.values() if n in self.cloud.vms]

    def _create_claim(self, shape: ClaimShape) -> Vm:
        vm = self.cloud.create_vm(shape.name)
        name = f"{shape.nodepool}-{random_suffix()}"
        nodepool = self.store.get(R.NODEPOOLS, "", shape.nodepool) or {"metadata": {}}
        template = (nodepool.get("spec") or {}).get("template") or {}
        claim = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "labels": {
                    NODEPOOL_LABEL: shape.nodepool,
                    CAPACITY_TYPE_LABEL: shape.capacity_type,
                    INSTANCE_TYPE_LABEL: shape.vm_size,
                    ZONE_LABEL: self._templates[shape.name]["metadata"]["labels"][ZONE_LABEL],
                },
                "ownerReferences": [
                    {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                     "name": shape.nodepool, "uid": nodepool["metadata"].get("uid", ""),
                     "blockOwnerDeletion": True}
                ],
            },
            "spec": {
                "nodeClassRef": (template.get("spec") or {}).get("nodeClassRef") or {},
                "requirements": (template.get("spec") or {}).get("requirements") or [],
                "taints": [dict(t) for t in shape.taint_objects],
            },
            "status": {"conditions": [self._condition("Launched")]},
        }  # fmt: skip
        self.store.create(R.NODECLAIMS, claim)
        self._claims[name] = vm.node_name
        self.launched.append((name, shape.nodepool, shape.capacity_type))
        return vm

    def _condition(self, kind: str) -> Obj:
        now = format_time(self.store.clock.now())
        return {"type": kind, "status": "True", "reason": kind, "message": "",
                "lastTransitionTime": now}  # fmt: skip

    def _register(self) -> int:
        """A NodeClaim whose node is up says so (nodeName, providerID, Ready)."""
        changed = 0
        for claim_name, node_name in self._claims.items():
            claim = self.store.get(R.NODECLAIMS, "", claim_name)
            node = self.store.get(R.NODES, "", node_name)
            if claim is None or node is None or (claim.get("status") or {}).get("nodeName"):
                continue
            status = {
                "nodeName": node_name,
                "providerID": node["spec"].get("providerID", ""),
                "capacity": dict(node["status"].get("capacity") or {}),
                "allocatable": dict(node["status"].get("allocatable") or {}),
                "conditions": [self._condition(c) for c in
                               ("Launched", "Registered", "Initialized", "Ready")],
            }  # fmt: skip
            self.store.update(R.NODECLAIMS, dict(claim, status=status))
            changed += 1
        return changed

    def _forget_lost(self) -> int:
        """NodeClaims whose VM is gone (preempted, or removed by hand) are deleted, as Karpenter's
        garbage collection does for instances that no longer exist."""
        removed = 0
        for claim_name, node_name in list(self._claims.items()):
            if node_name in self.cloud.vms:
                continue
            del self._claims[claim_name]
            if self.store.get(R.NODECLAIMS, "", claim_name) is not None:
                self.store.delete(R.NODECLAIMS, "", claim_name)
                removed += 1
        return removed

    # ---- consolidation ----------------------------------------------------------------------

    def _consolidate(self) -> int:
        now = self.store.clock.now().timestamp()
        removed = 0
        for claim_name, node_name in list(self._claims.items()):
            vm = self.cloud.vms.get(node_name)
            node = self.store.get(R.NODES, "", node_name)
            if vm is None or vm.state != "running" or node is None:
                continue
            nodepool = self.store.get(R.NODEPOOLS, "", getattr(vm.pool, "nodepool", ""))
            after = seconds(
                ((nodepool or {}).get("spec") or {}).get("disruption", {}).get("consolidateAfter")
            )
            pods = self.store.pods_on_node(node_name)
            if after is None or any(is_workload_pod(p) for p in pods):
                self._empty_since.pop(node_name, None)
                continue
            since = self._empty_since.setdefault(node_name, now)
            held = any(
                (obj["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"
                for obj in (node, *pods)
            )
            if now - since < after or held:
                continue
            self.cloud.delete_vm(node_name)
            del self._claims[claim_name]
            self._empty_since.pop(node_name, None)
            if self.store.get(R.NODECLAIMS, "", claim_name) is not None:
                self.store.delete(R.NODECLAIMS, "", claim_name)
            self.consolidated.append(node_name)
            removed += 1
        return removed

    # ---- disruption: drift, consolidation, expiry -------------------------------------------

    def disrupt(self, node_name: str) -> None:
        """Start disrupting one of the NodeClaims' nodes (see the module docstring)."""
        node = self.store.get(R.NODES, "", node_name)
        if node is None or node_name not in self._claims.values():
            raise ValueError(f"{node_name} is not a node of a NodeClaim")
        spec = dict(node.get("spec") or {})
        taints = list(spec.get("taints") or [])
        if not any(t.get("key") == DISRUPTED_TAINT for t in taints):
            spec["taints"] = [*taints, {"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]
            self.store.update(R.NODES, dict(node, spec=spec))
        self._disrupting[node_name] = self.store.clock.now().timestamp() + DRAIN_AFTER_SECONDS

    def _drain_disrupted(self) -> int:
        now = self.store.clock.now().timestamp()
        worked = 0
        for node_name, next_try in list(self._disrupting.items()):
            if now < next_try:
                continue
            left = False
            refused = False
            for pod in self.store.pods_on_node(node_name):
                if not is_workload_pod(pod) or pod_phase(pod) in ("Succeeded", "Failed"):
                    continue
                left = True
                meta = pod["metadata"]
                if (
                    is_terminating(pod)
                    or (meta.get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"
                ):
                    continue
                try:
                    evict(self.store, meta["namespace"], meta["name"], {})
                except ApiError as error:
                    if error.code != 404:
                        refused = True
                        self.refused.append((now, meta["name"]))
                    continue
                self.evicted.append((now, meta["name"]))
                worked += 1
            if not left:
                del self._disrupting[node_name]
                claim = next((c for c, n in self._claims.items() if n == node_name), None)
                self.cloud.delete_vm(node_name)
                if claim is not None:
                    del self._claims[claim]
                    if self.store.get(R.NODECLAIMS, "", claim) is not None:
                        self.store.delete(R.NODECLAIMS, "", claim)
                worked += 1
                continue
            self._disrupting[node_name] = now + (DRAIN_RETRY_SECONDS if refused else 0.0)
        return worked
