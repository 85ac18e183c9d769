"""The emulator's object store: every API object as a plain dict, with resourceVersions,
watch fan-out, change listeners and the few indexes the controllers need.

Objects stored here are owned by the store and never mutated in place: a writer builds a new
dict (`copy_of` gives a private deep copy) and hands it to `create`/`replace`. Each write
serialises the object to JSON once; lists and watch events reuse those bytes, so listing 50 000
pods is a byte join, not 50 000 `json.dumps` calls.

Semantics kept from the real API server: one monotonic resourceVersion per store; a PUT with a
stale resourceVersion is a 409 Conflict; a no-op write changes nothing (no new resourceVersion,
no watch event); `metadata.generation` moves only when the spec does; the main resource ignores
`status` and the status subresource ignores everything else; graceful deletion with
`deletionTimestamp` and finalizers; a watch from a resourceVersion older than the retained
history is 410 Gone. Not here: HTTP (see `apiserver`), controllers (see `cluster`).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import random
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rebalancer.clock import Clock
from rebalancer_sim import defaults
from rebalancer_sim import resources as R
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.selectors import LabelPredicate, ObjectPredicate
from rebalancer_sim.status import (
    STALE,
    ApiError,
    already_exists,
    conflict,
    gone,
    invalid,
    not_found,
    precondition_failed,
)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

DEFAULT_HISTORY = 20_000
# kube-apiserver's limit on one object's annotations, keys and values together, in UTF-8 bytes
# (apimachinery `validation.TotalAnnotationSizeLimitB`), checked on every create and update.
TOTAL_ANNOTATION_SIZE_LIMIT_BYTES = 256 * 1024
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_POD_UPDATE_RULE = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's generateName alphabet


# No circular check: store objects are JSON trees; skipping it makes encoding faster.
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def dumps(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode()


def format_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def random_suffix(length: int = 5) -> str:
    return "".join(random.choices(_SUFFIX_ALPHABET, k=length))


@dataclass(slots=True)
class Change:
    resource: ResourceType
    type: str  # ADDED | MODIFIED | DELETED
    old: Obj | None
    new: Obj  # for DELETED: the last state, carrying the deletion's resourceVersion
    raw: bytes
    rv: int


class Watcher:
    """One open watch: a filter and a buffer of encoded events the HTTP handler drains."""

    def __init__(
        self,
        resource: ResourceType,
        *,
        namespace: str | None,
        labels: LabelPredicate | None,
        fields: ObjectPredicate | None,
        encode: Callable[[str, bytes], bytes] | None = None,
    ) -> None:
        self.resource = resource
        self.encode = encode  # e.g. a Table rendering for `kubectl get -w`
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.pending: deque[bytes] = deque()
        self.wakeup = asyncio.Event()
        self.last_rv = 0

    def matches(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels(meta.get("labels") or {}):
            return False
        return self.fields is None or self.fields(obj)

    def push(self, event_type: str, raw: bytes, rv: int) -> None:
        if self.encode is not None:
            self.pending.append(self.encode(event_type, raw))
        else:
            self.pending.append(b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}\n")
        self.last_rv = rv
        self.wakeup.set()

    def offer(self, change: Change) -> None:
        was = change.old is not None and self.matches(change.old)
        now = self.matches(change.new)
        if change.type == "DELETED":
            if was or now:
                self.push("DELETED", change.raw, change.rv)
        elif now:
            self.push("MODIFIED" if was else "ADDED", change.raw, change.rv)
        elif was and change.old is not None:
            # Upstream's watch cache: an object that leaves the selector is reported deleted, as
            # it was before the change (that the watcher saw) with the change's resourceVersion.
            last_seen = dict(change.old)
            last_seen["metadata"] = dict(change.old["metadata"], resourceVersion=str(change.rv))
            self.push("DELETED", dumps(last_seen), change.rv)


class Store:
    def __init__(self, clock: Clock, *, history_size: int = DEFAULT_HISTORY) -> None:
        self.clock = clock
        self.resource_version = 1
        self._objects: dict[str, dict[str, dict[str, Obj]]] = {r.key: {} for r in R.ALL}
        # Each object's JSON without kind/apiVersion (the form list items take upstream): a list
        # is a join; a GET or watch event puts `_type_prefix` back in front.
        self._raw: dict[str, dict[str, dict[str, bytes]]] = {r.key: {} for r in R.ALL}
        self._history: dict[str, deque[Change]] = {r.key: deque() for r in R.ALL}
        self._history_start: dict[str, int] = {r.key: 0 for r in R.ALL}
        self._history_size = history_size
        self._watchers: dict[str, set[Watcher]] = {r.key: set() for r in R.ALL}
        self.listeners: list[Callable[[Change], None]] = []
        self._pods_by_node: dict[str, dict[Key, None]] = {}
        self._dependents: dict[str, dict[tuple[str, str, str], None]] = {}
        self.writes = 0

    # ---- reading -------------------------------------------------------------------------

    def get(self, resource: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._objects[resource.key].get(namespace, {}).get(name)

    def must_get(self, resource: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.get(resource, namespace, name)
        if obj is None:
            raise not_found(resource, name)
        return obj

    def raw(self, resource: ResourceType, namespace: str, name: str) -> bytes | None:
        """The object's JSON as a GET returns it (kind and apiVersion first)."""
        stored = self._raw[resource.key].get(namespace, {}).get(name)
        return None if stored is None else _type_prefix(resource) + stored[1:]

    def copy_of(self, resource: ResourceType, namespace: str, name: str) -> Obj | None:
        """A private deep copy to modify and write back (JSON round trip: faster than deepcopy)."""
        raw = self.raw(resource, namespace, name)
        return None if raw is None else json.loads(raw)

    def items(self, resource: ResourceType, namespace: str | None = None) -> Iterator[Obj]:
        by_namespace = self._objects[resource.key]
        if namespace is not None:
            yield from list(by_namespace.get(namespace, {}).values())
            return
        for objects in list(by_namespace.values()):
            yield from list(objects.values())

    def count(self, resource: ResourceType) -> int:
        return sum(len(objects) for objects in self._objects[resource.key].values())

    def pods_on_node(self, node_name: str) -> list[Obj]:
        pods = self._objects[R.PODS.key]
        found = []
        for namespace, name in self._pods_by_node.get(node_name, {}):
            pod = pods.get(namespace, {}).get(name)
            if pod is not None:
                found.append(pod)
        return found

    def bound_node_names(self) -> list[str]:
        return [node for node, pods in self._pods_by_node.items() if pods]

    def dependents_of(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        found = []
        for key, namespace, name in list(self._dependents.get(uid, {})):
            resource = R.BY_KEY[key]
            obj = self.get(resource, namespace, name)
            if obj is not None:
                found.append((resource, obj))
        return found

    def list_raw(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        labels: LabelPredicate | None = None,
        fields: ObjectPredicate | None = None,
        node_name: str | None = None,
        limit: int = 0,
        start_after: Key | None = None,
    ) -> tuple[list[bytes], Key | None, int]:
        """Matching objects' JSON in key order: (items, last key if cut short, items left)."""
        objects = self._objects[resource.key]
        raws = self._raw[resource.key]
        if node_name is not None and resource is R.PODS:
            keys = sorted(self._pods_by_node.get(node_name, {}))
            if namespace is not None:
                keys = [k for k in keys if k[0] == namespace]
        elif namespace is not None:
            keys = [(namespace, name) for name in sorted(objects.get(namespace, {}))]
        else:
            keys = [(ns, name) for ns in sorted(objects) for name in sorted(objects[ns])]
        if start_after is not None:
            keys = keys[bisect.bisect_right(keys, start_after) :]
        out: list[bytes] = []
        for index, (ns, name) in enumerate(keys):
            obj = objects.get(ns, {}).get(name)
            if obj is None:
                continue
            meta = obj["metadata"]
            if labels is not None and not labels(meta.get("labels") or {}):
                continue
            if fields is not None and not fields(obj):
                continue
            out.append(raws[ns][name])  # upstream list items carry no kind/apiVersion
            if limit and len(out) >= limit and index + 1 < len(keys):
                return out, (ns, name), len(keys) - index - 1
        return out, None, 0

    # ---- writing -------------------------------------------------------------------------

    def create(self, resource: ResourceType, obj: Obj) -> Obj:
        """Create `obj` (the store takes it over). Fills uid, resourceVersion, timestamps."""
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                # Upstream returns 409 on a generated-name collision and clients retry; with
                # 50 000 pods collisions happen, so the store picks another suffix itself.
                namespace_for_name = meta.get("namespace", "") if resource.namespaced else ""
                for _ in range(10):
                    meta["name"] = meta["generateName"] + random_suffix()
                    if self.get(resource, namespace_for_name, meta["name"]) is None:
                        break
            else:
                raise invalid(
                    resource,
                    "",
                    [
                        (
                            "metadata.name",
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                        )
                    ],
                )
        name = meta["name"]
        if not _NAME.match(name) or len(name) > 253:
            raise invalid(
                resource,
                name,
                [
                    (
                        "metadata.name",
                        "FieldValueInvalid",
                        f'Invalid value: "{name}": {_NAME_RULE}',
                    )
                ],
            )
        namespace = meta.get("namespace", "") if resource.namespaced else ""
        if resource.namespaced:
            if not namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object is empty: a namespace is required",
                )
            if self.get(R.NAMESPACES, "", namespace) is None:
                raise not_found(R.NAMESPACES, namespace)
            ns_obj = self.get(R.NAMESPACES, "", namespace)
            if ns_obj is not None and ns_obj["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{resource.plural} "{name}" is forbidden: unable to create new content in '
                    f"namespace {namespace} because it is being terminated",
                )
        else:
            meta.pop("namespace", None)
        if self.get(resource, namespace, name) is not None:
            raise already_exists(resource, name)
        _check_annotations(resource, name, meta)
        defaults.on_create(resource, obj)
        obj["apiVersion"] = resource.api_version
        obj["kind"] = resource.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = format_time(self.clock.now())
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        if resource.has_generation:
            meta["generation"] = 1
        if resource is R.NAMESPACES:
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        return self._commit(resource, "ADDED", None, obj)

    def replace(
        self,
        resource: ResourceType,
        obj: Obj,
        *,
        subresource: str | None = None,
        check_version: bool = True,
    ) -> Obj:
        """PUT semantics: the whole object (or its status); 409 if its resourceVersion is stale."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "") if resource.namespaced else ""
        name = meta.get("name", "")
        existing = self.must_get(resource, namespace, name)
        old_meta = existing["metadata"]
        wanted_rv = meta.get("resourceVersion")
        if check_version and wanted_rv and wanted_rv != old_meta["resourceVersion"]:
            raise conflict(resource, name, STALE)
        if subresource == "internal":
            new = dict(obj)
            new["metadata"] = dict(meta)
            if resource.has_generation and new.get("spec") != existing.get("spec"):
                new["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        elif subresource == "status":
            new = dict(existing)
            if "status" in obj:
                new["status"] = obj["status"]
            new["metadata"] = dict(old_meta)
        else:
            new = dict(obj)
            new["apiVersion"], new["kind"] = resource.api_version, resource.kind
            if "status" in resource.subresources and "status" in existing:
                new["status"] = existing["status"]
            elif "status" in resource.subresources:
                new.pop("status", None)
            new_meta = dict(meta)
            for field in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
            ):
                if field in old_meta:
                    new_meta[field] = old_meta[field]
                else:
                    new_meta.pop(field, None)
            new["metadata"] = new_meta
            if resource.has_generation and new.get("spec") != existing.get("spec"):
                new_meta["generation"] = old_meta.get("generation", 1) + 1
            if resource is R.PODS:
                _check_pod_update(existing, new)
        _check_annotations(resource, name, new["metadata"])
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if new == existing:
            return existing  # a no-op write: upstream keeps the resourceVersion, no event
        new = self._commit(resource, "MODIFIED", existing, new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            grace = new["metadata"].get("deletionGracePeriodSeconds", 0)
            if resource is not R.PODS or grace == 0 or not new["spec"].get("nodeName"):
                self._remove(resource, new)
        return new

    def update(self, resource: ResourceType, obj: Obj) -> Obj:
        """A trusted write by an in-process controller (scheduler binding, kubelet status): spec
        and status together, no resourceVersion check, no immutability rules."""
        return self.replace(resource, obj, subresource="internal", check_version=False)

    def delete(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        *,
        grace_seconds: int | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[Obj, bool]:
        """Delete, gracefully for bound pods. Returns (last state, removed now)."""
        existing = self.must_get(resource, namespace, name)
        meta = existing["metadata"]
        if preconditions:
            uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
            if uid and uid != meta["uid"]:
                raise precondition_failed(resource, name, "UID", uid, meta["uid"])
            if rv and rv != meta["resourceVersion"]:
                raise precondition_failed(
                    resource, name, "ResourceVersion", rv, meta["resourceVersion"]
                )
        if resource is R.NAMESPACES:
            return self._delete_namespace(existing), False
        grace = 0
        if resource is R.PODS:
            spec = existing.get("spec", {})
            default = spec.get("terminationGracePeriodSeconds", 30)
            grace = default if grace_seconds is None else max(0, grace_seconds)
            phase = existing.get("status", {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        finalizers = meta.get("finalizers") or []
        if grace == 0 and not finalizers:
            return self._remove(resource, existing), True
        current_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current_grace is not None and grace >= current_grace:
            return existing, False  # already terminating; a longer grace cannot extend it
        new = dict(existing)
        new["metadata"] = dict(meta)
        new["metadata"]["deletionTimestamp"] = format_time(
            self.clock.now() + timedelta(seconds=grace)
        )
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        if resource.has_generation:
            new["metadata"]["generation"] = meta.get("generation", 1) + 1
        return self._commit(resource, "MODIFIED", existing, new), False

    def finish_pod_termination(self, namespace: str, name: str) -> None:
        """The kubelet is done with a terminating pod: remove it, or wait for its finalizers."""
        pod = self.get(R.PODS, namespace, name)
        if pod is None:
            return
        if pod["metadata"].get("finalizers"):
            if pod["metadata"].get("deletionGracePeriodSeconds") != 0:
                new = dict(pod)
                new["metadata"] = dict(pod["metadata"], deletionGracePeriodSeconds=0)
                self._commit(R.PODS, "MODIFIED", pod, new)
            return
        self._remove(R.PODS, pod)

    def force_remove(self, resource: ResourceType, namespace: str, name: str) -> None:
        """Remove without grace or finalizers (pod GC, a node's VM gone)."""
        obj = self.get(resource, namespace, name)
        if obj is not None:
            self._remove(resource, obj)

    def compact(self) -> None:
        """Forget all watch history: any watch from an older resourceVersion now gets 410."""
        for key in self._history:
            self._history[key].clear()
            self._history_start[key] = self.resource_version

    def _delete_namespace(self, namespace_obj: Obj) -> Obj:
        name = namespace_obj["metadata"]["name"]
        for resource in R.ALL:
            if resource.namespaced:
                for obj in list(self.items(resource, name)):
                    self._remove(resource, obj)
        return self._remove(R.NAMESPACES, namespace_obj)

    def _remove(self, resource: ResourceType, obj: Obj) -> Obj:
        last = dict(obj)
        last["metadata"] = dict(obj["metadata"])
        return self._commit(resource, "DELETED", obj, last)

    # ---- watching --------------------------------------------------------------------------

    def watch(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        labels: LabelPredicate | None = None,
        fields: ObjectPredicate | None = None,
        since: int | None = None,
        encode: Callable[[str, bytes], bytes] | None = None,
    ) -> Watcher:
        """Open a watch. `since=None`: synthetic ADDED events for what exists, then changes.
        `encode(type, object JSON)` replaces the standard event line when given."""
        watcher = Watcher(
            resource, namespace=namespace, labels=labels, fields=fields, encode=encode
        )
        if since is None:
            for raw, obj in self._snapshot(resource, namespace):
                if watcher.matches(obj):
                    watcher.push("ADDED", raw, int(obj["metadata"]["resourceVersion"]))
        else:
            if since < self._history_start[resource.key]:
                raise gone(
                    f"too old resource version: {since} ({self._history_start[resource.key] + 1})"
                )
            for change in self._history[resource.key]:
                if change.rv > since:
                    watcher.offer(change)
        watcher.last_rv = max(watcher.last_rv, self.resource_version)
        self._watchers[resource.key].add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers[watcher.resource.key].discard(watcher)

    def watcher_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())

    def _snapshot(self, resource: ResourceType, namespace: str | None) -> list[tuple[bytes, Obj]]:
        objects, raws = self._objects[resource.key], self._raw[resource.key]
        namespaces = [namespace] if namespace is not None else list(objects)
        prefix = _type_prefix(resource)
        return [
            (prefix + raws[ns][name][1:], obj)
            for ns in namespaces
            for name, obj in objects.get(ns, {}).items()
        ]

    # ---- the one write path ----------------------------------------------------------------

    def _commit(self, resource: ResourceType, event_type: str, old: Obj | None, new: Obj) -> Obj:
        """The one write path; returns the stored dict (kind and apiVersion first, as upstream
        writes them, so a list can drop them from its items by slicing bytes)."""
        if list(new)[:2] != ["kind", "apiVersion"] or (new["kind"], new["apiVersion"]) != (
            resource.kind,
            resource.api_version,
        ):
            rest = {k: v for k, v in new.items() if k not in ("kind", "apiVersion")}
            new = {"kind": resource.kind, "apiVersion": resource.api_version, **rest}
        self.resource_version += 1
        self.writes += 1
        rv = self.resource_version
        _drop_empty(new["metadata"])
        new["metadata"]["resourceVersion"] = str(rv)
        raw = dumps(new)
        prefix_length = len(_type_prefix(resource))
        meta = new["metadata"]
        namespace = meta.get("namespace", "") if resource.namespaced else ""
        name = meta["name"]
        if event_type == "DELETED":
            self._objects[resource.key].get(namespace, {}).pop(name, None)
            self._raw[resource.key].get(namespace, {}).pop(name, None)
            if not self._objects[resource.key].get(namespace, True):
                del self._objects[resource.key][namespace]
                del self._raw[resource.key][namespace]
        else:
            self._objects[resource.key].setdefault(namespace, {})[name] = new
            self._raw[resource.key].setdefault(namespace, {})[name] = b"{" + raw[prefix_length:]
        self._reindex(resource, old, None if event_type == "DELETED" else new)
        change = Change(resource, event_type, old, new, raw, rv)
        history = self._history[resource.key]
        history.append(change)
        if len(history) > self._history_size:
            self._history_start[resource.key] = history.popleft().rv
        for watcher in self._watchers[resource.key]:
            watcher.offer(change)
        for listener in self.listeners:
            listener(change)
        return new

    def _reindex(self, resource: ResourceType, old: Obj | None, new: Obj | None) -> None:
        if resource is R.PODS:
            old_node = (old or {}).get("spec", {}).get("nodeName") if old else None
            new_node = new.get("spec", {}).get("nodeName") if new else None
            if old_node != new_node or new is None:
                key = _key(old or new or {})
                if old_node:
                    bucket = self._pods_by_node.get(old_node)
                    if bucket is not None:
                        bucket.pop(key, None)
                        if not bucket:
                            del self._pods_by_node[old_node]
                if new_node:
                    self._pods_by_node.setdefault(new_node, {})[key] = None
        old_owners = _owner_uids(old)
        new_owners = _owner_uids(new)
        if old_owners != new_owners:
            ref = (resource.key, *_key(old or new or {}))
            for uid in old_owners - new_owners:
                bucket2 = self._dependents.get(uid)
                if bucket2 is not None:
                    bucket2.pop(ref, None)
                    if not bucket2:
                        del self._dependents[uid]
            for uid in new_owners - old_owners:
                self._dependents.setdefault(uid, {})[ref] = None


_TYPE_PREFIXES: dict[str, bytes] = {}


_OMIT_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def _drop_empty(meta: Obj) -> None:
    """Upstream's metadata fields are `omitempty`: an empty map or list is not written."""
    for key in _OMIT_WHEN_EMPTY:
        if key in meta and not meta[key]:
            del meta[key]


def _type_prefix(resource: ResourceType) -> bytes:
    """`{"kind":"Pod","apiVersion":"v1",`: how every stored object's JSON begins."""
    prefix = _TYPE_PREFIXES.get(resource.key)
    if prefix is None:
        prefix = dumps({"kind": resource.kind, "apiVersion": resource.api_version})[:-1] + b","
        _TYPE_PREFIXES[resource.key] = prefix
    return prefix


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def _owner_uids(obj: Obj | None) -> frozenset[str]:
    if not obj:
        return frozenset()
    refs = obj["metadata"].get("ownerReferences")
    if not refs:
        return frozenset()
    return frozenset(ref["uid"] for ref in refs if "uid" in ref)


def _check_annotations(resource: ResourceType, name: str, meta: Obj) -> None:
    """422 for annotations over the limit, as apimachinery's `ValidateAnnotations` words it: the
    product's writes near the limit (a Node's annotations) must fail here as they do upstream."""
    annotations = meta.get("annotations") or {}
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES:
        raise invalid(
            resource,
            name,
            [
                (
                    "metadata.annotations",
                    "FieldValueTooLong",
                    f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT_BYTES} bytes",
                )
            ],
        )


def _check_pod_update(existing: Obj, new: Obj) -> None:
    """Pod spec is immutable but for a few fields (images, activeDeadlineSeconds, tolerations)."""
    old_spec, new_spec = dict(existing.get("spec", {})), dict(new.get("spec", {}))
    for field in ("containers", "initContainers", "activeDeadlineSeconds", "tolerations"):
        old_spec.pop(field, None)
        new_spec.pop(field, None)
    if old_spec != new_spec:
        name = existing["metadata"]["name"]
        raise invalid(
            R.PODS,
            name,
            [
                (
                    "spec",
                    "FieldValueForbidden",
                    _POD_UPDATE_RULE,
                )
            ],
        )
