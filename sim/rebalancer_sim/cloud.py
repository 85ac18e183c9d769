"""The Azure side: VMs behind the nodes, their IMDS Scheduled Events, and what evictions do.

Every node has a VM registered with the one shared `ImdsEmulator` (placement group: its scale
set; GPU scale sets in one fault domain see only their own events, shared reference A.9). When
a Preempt (or Terminate) event starts (at NotBefore, or earlier once acknowledged) the VM is
taken away: the node's Ready condition goes Unknown ("Kubelet stopped posting node status.")
at once, and `node_delete_delay_seconds` later the Node is deleted, its pods with it (AKS's
`Delete` eviction policy, shared reference B.4). With `Deallocate` the Node stays NotReady with
the taint `node.cloudprovider.kubernetes.io/shutdown:NoSchedule`.

Events reach the cloud through `ImdsEmulator.on_schedule`, whoever schedules them (the timeline,
`ClusterEmulator.preempt`, the control API): one path.

A Reboot or Redeploy (Redeploy: the VM moves to another host, keeping its name and OS disk)
takes the VM down for `reboot_seconds` once it starts: the node is NotReady (Unknown) meanwhile,
the event stays Started that long, then the node is Ready again and its pods start over (they
load their model again). A Freeze (a pause of seconds) changes nothing the cluster can see.

New VMs (the autoscaler's, or spot capacity coming back) appear as Ready nodes after their
pool's provisioning delay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rebalancer_sim import resources as R
from rebalancer_sim.imds import EmulatedEvent, ImdsEmulator
from rebalancer_sim.objects import Obj, with_condition
from rebalancer_sim.pools import ClusterInfo, PoolSpec, base36, build_node, node_name, vm_name
from rebalancer_sim.store import Store, format_time

SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
TAKES_VM_AWAY = frozenset({"Preempt", "Terminate"})
RESTARTS_VM = frozenset({"Reboot", "Redeploy"})


@dataclass
class Vm:
    name: str
    node_name: str
    pool: PoolSpec
    instance_id: int
    state: str = "running"  # provisioning | running | rebooting | deallocated | deleted
    ready_at: float = 0.0  # provisioning: when the node appears; rebooting: when it is back
    delete_node_at: float | None = None


class Cloud:
    def __init__(
        self,
        store: Store,
        imds: ImdsEmulator,
        *,
        cluster: ClusterInfo | None = None,
        node_delete_delay_seconds: float = 5.0,
        reboot_seconds: float = 60.0,
    ) -> None:
        self.store = store
        self.reboot_seconds = reboot_seconds
        # Called with a node's name when its VM is back from a reboot (the kubelets restart its
        # pods).
        self.on_node_back: Callable[[str], object] | None = None
        self.imds = imds
        # Azure keeps a Reboot/Redeploy Started while the VM is down.
        for event_type in RESTARTS_VM:
            imds.started_seconds_by_type[event_type] = reboot_seconds
        imds.on_schedule.append(self._watch)
        self.cluster = cluster or ClusterInfo()
        self.node_delete_delay_seconds = node_delete_delay_seconds
        self.pools: dict[str, PoolSpec] = {}
        self.vms: dict[str, Vm] = {}  # by node name
        self._next_instance: dict[str, int] = {}
        self._watched: dict[str, EmulatedEvent] = {}  # events not yet acted on
        self.preempted: list[str] = []  # node names whose VM was taken away, in order
        # GPU nodes advertise nvidia.com/gpu only once a device plugin registers (deviceplugin.py).
        self.gpus_from_device_plugin = False

    def _now(self) -> float:
        return self.store.clock.now().timestamp()

    # ---- pools and VMs -----------------------------------------------------------------------

    def add_pool(self, pool: PoolSpec) -> None:
        self.pools[pool.name] = pool
        self._next_instance.setdefault(pool.name, 0)

    def pool_vms(self, pool_name: str, *states: str) -> list[Vm]:
        wanted = states or ("provisioning", "running")
        return [vm for vm in self.vms.values() if vm.pool.name == pool_name and vm.state in wanted]

    def spot_room(self, pool: PoolSpec) -> int:
        """How many more VMs Azure would give this pool now (spot capacity), ignoring max."""
        if not pool.is_spot or pool.spot_capacity is None:
            return 1 << 30
        return max(0, pool.spot_capacity - len(self.pool_vms(pool.name)))

    def can_grow(self, pool: PoolSpec) -> bool:
        return len(self.pool_vms(pool.name)) < pool.upper_bound and self.spot_room(pool) > 0

    def create_vm(self, pool_name: str, *, delay_seconds: float | None = None) -> Vm:
        """A new VM in the pool; its Node appears now, or after the pool's provisioning delay."""
        pool = self.pools[pool_name]
        instance_id = self._next_instance[pool_name]
        self._next_instance[pool_name] = instance_id + 1
        vm = Vm(
            name=vm_name(pool, instance_id),
            node_name=node_name(pool, instance_id),
            pool=pool,
            instance_id=instance_id,
        )
        self.vms[vm.node_name] = vm
        delay = pool.provisioning_seconds if delay_seconds is None else delay_seconds
        if delay <= 0:
            self._boot(vm)
        else:
            vm.state = "provisioning"
            vm.ready_at = self._now() + delay
        return vm

    def _boot(self, vm: Vm) -> None:
        vm.state = "running"
        self.imds.add_vm(
            vm.name,
            placement_group=f"{vm.pool.scale_set}-pg{vm.instance_id // 100}",
            broadcast=not vm.pool.gpus,
        )
        node = build_node(
            vm.pool,
            vm.instance_id,
            self.cluster,
            now=format_time(self.store.clock.now()),
            gpus_advertised=not self.gpus_from_device_plugin,
        )
        self.store.create(R.NODES, node)

    def node_runs(self, node_name: str) -> bool:
        vm = self.vms.get(node_name)
        return vm is None or vm.state == "running"  # nodes we did not create: assume running

    def vm_for(self, node_name: str) -> Vm:
        vm = self.vms.get(node_name)
        if vm is None:
            raise KeyError(f"no VM behind node {node_name!r}")
        return vm

    def delete_vm(self, node_name: str) -> None:
        """Scale-down: the VM and its Node go now (the autoscaler drained nothing: it was empty)."""
        vm = self.vm_for(node_name)
        vm.state = "deleted"
        self.imds.remove_vm(vm.name)
        if self.store.get(R.NODES, "", node_name) is not None:
            self.store.delete(R.NODES, "", node_name)
        del self.vms[node_name]

    # ---- events ------------------------------------------------------------------------------

    def schedule_event(
        self, event_type: str, node_names: list[str], *, notice_seconds: float | None = None
    ) -> EmulatedEvent:
        vms = [self.vm_for(name).name for name in node_names]
        return self.imds.schedule(event_type, vms, notice_seconds=notice_seconds)

    def _watch(self, event: EmulatedEvent) -> None:
        """Every event IMDS announces (from the timeline, Python or the control API) is carried
        out here, at its start: one path, whoever scheduled it."""
        if event.event_type in TAKES_VM_AWAY or event.event_type in RESTARTS_VM:
            self._watched[event.event_id] = event

    def restart(self, node_name: str) -> None:
        """The VM reboots (or is redeployed) now: down for `reboot_seconds`, then back."""
        vm = self.vms.get(node_name)
        if vm is None or vm.state != "running":
            return
        vm.state = "rebooting"
        vm.ready_at = self._now() + self.reboot_seconds
        node = self.store.get(R.NODES, "", node_name)
        if node is not None:
            self._mark_lost(node, shutdown=False)

    def _mark_back(self, vm: Vm) -> None:
        vm.state = "running"
        node = self.store.get(R.NODES, "", vm.node_name)
        if node is not None:
            now = format_time(self.store.clock.now())
            status = dict(node.get("status") or {})
            conditions = status.get("conditions")
            for condition, value, reason, message in (
                ("MemoryPressure", "False", "KubeletHasSufficientMemory", ""),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure", ""),
                ("PIDPressure", "False", "KubeletHasSufficientPID", ""),
                ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ):
                conditions = with_condition(
                    conditions, condition, value, now=now, reason=reason, message=message
                )
            status["conditions"] = conditions
            self.store.update(R.NODES, dict(node, status=status))
        if self.on_node_back is not None:
            self.on_node_back(vm.node_name)

    def take_away(self, node_name: str) -> None:
        """The VM is evicted now (capacity or price): node NotReady, then deleted or shut down."""
        vm = self.vms.get(node_name)
        if vm is None or vm.state not in ("running", "provisioning"):
            return
        if vm.state == "provisioning":
            del self.vms[node_name]
            return
        self.preempted.append(node_name)
        self.imds.remove_vm(vm.name)
        now = self._now()
        node = self.store.get(R.NODES, "", node_name)
        if vm.pool.is_spot and vm.pool.eviction_policy == "Deallocate":
            vm.state = "deallocated"
            if node is not None:
                self._mark_lost(node, shutdown=True)
            return
        vm.state = "deleted"
        if node is not None:
            self._mark_lost(node, shutdown=False)
        vm.delete_node_at = now + self.node_delete_delay_seconds

    def _mark_lost(self, node: Obj, *, shutdown: bool) -> None:
        now = format_time(self.store.clock.now())
        updated = dict(node)
        status = dict(node.get("status") or {})
        conditions = status.get("conditions")
        for condition in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready"):
            conditions = with_condition(
                conditions,
                condition,
                "Unknown",
                now=now,
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
            )
        status["conditions"] = conditions
        updated["status"] = status
        if shutdown:
            spec = dict(node.get("spec") or {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != SHUTDOWN_TAINT]
            spec["taints"] = [*taints, {"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]
            updated["spec"] = spec
        self.store.update(R.NODES, updated)

    def reconcile(self) -> int:
        now = self._now()
        moment = self.store.clock.now()
        acted = 0
        for event_id, event in list(self._watched.items()):
            state = event.state(moment)
            if state == "cancelled":
                del self._watched[event_id]
            elif state in ("started", "finished"):
                del self._watched[event_id]
                for resource in event.resources:
                    node = self.node_of_vm(resource)
                    if node is None:
                        continue
                    if event.event_type in RESTARTS_VM:
                        self.restart(node)
                    else:
                        self.take_away(node)
                    acted += 1
        for vm in list(self.vms.values()):
            if vm.state == "provisioning" and vm.ready_at <= now:
                self._boot(vm)
                acted += 1
            elif vm.state == "rebooting" and vm.ready_at <= now:
                self._mark_back(vm)
                acted += 1
            elif (
                vm.state == "deleted"
                and vm.delete_node_at is not None
                and (vm.delete_node_at <= now)
            ):
                if self.store.get(R.NODES, "", vm.node_name) is not None:
                    self.store.delete(R.NODES, "", vm.node_name)
                del self.vms[vm.node_name]
                acted += 1
        return acted

    def node_of_vm(self, vm_name_: str) -> str | None:
        # VM names are `<scale set>_<decimal id>`, node names `<scale set><base-36 id>`.
        scale_set, _, instance = vm_name_.rpartition("_")
        if not instance.isdigit():
            return None
        node = f"{scale_set}{base36(int(instance))}"
        return node if node in self.vms else None

    def set_spot_capacity(
        self, pool_name: str, available: int | None, *, notice_seconds: float = 30.0
    ) -> list[EmulatedEvent]:
        """Azure now has room for `available` spot VMs in this pool (None: unlimited); VMs above
        that get a Preempt with the given notice, newest first."""
        pool = self.pools[pool_name]
        pool.spot_capacity = available
        if available is None:
            return []
        running = sorted(
            self.pool_vms(pool_name, "running"), key=lambda vm: vm.instance_id, reverse=True
        )
        pending = {node for event in self._watched.values() for node in event.resources}
        doomed = [vm for vm in running if vm.name not in pending]
        provisioning = self.pool_vms(pool_name, "provisioning")
        # Requests not yet fulfilled are refused first (Azure has no room for them), then the
        # running VMs above the room get a Preempt.
        over = len(doomed) + len(provisioning) - available
        refused = min(len(provisioning), max(0, over))
        for vm in provisioning[:refused]:
            del self.vms[vm.node_name]
        events = []
        for vm in doomed[: max(0, over - refused)]:
            events.append(
                self.schedule_event("Preempt", [vm.node_name], notice_seconds=notice_seconds)
            )
        return events
