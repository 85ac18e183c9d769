"""Garbage collection: dependents of a deleted owner, and pods of a deleted node.

Background propagation only (what kubectl and most clients use): when an owner goes, the
objects whose controller reference points at it are deleted (pods gracefully). Pods bound to a
node that no longer exists are removed at once, as upstream's pod GC does for orphaned pods.
"""

from __future__ import annotations

from rebalancer_sim import resources as R
from rebalancer_sim.objects import controller_ref
from rebalancer_sim.status import ApiError
from rebalancer_sim.store import Change, Store


class GarbageCollector:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._gone_owners: dict[str, None] = {}
        self._gone_nodes: dict[str, None] = {}
        store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.type != "DELETED":
            return
        self._gone_owners[change.new["metadata"]["uid"]] = None
        if change.resource is R.NODES:
            self._gone_nodes[change.new["metadata"]["name"]] = None

    def reconcile(self) -> int:
        owners, self._gone_owners = self._gone_owners, {}
        nodes, self._gone_nodes = self._gone_nodes, {}
        removed = 0
        for node_name in nodes:
            if self.store.get(R.NODES, "", node_name) is not None:
                continue  # re-created under the same name
            for pod in self.store.pods_on_node(node_name):
                self.store.force_remove(
                    R.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
                removed += 1
        for uid in owners:
            for resource, obj in self.store.dependents_of(uid):
                ref = controller_ref(obj)
                if ref is None or ref.get("uid") != uid:
                    continue
                meta = obj["metadata"]
                try:
                    self.store.delete(resource, meta.get("namespace", ""), meta["name"])
                    removed += 1
                except ApiError:
                    pass
        return removed
