"""`events.k8s.io/v1` Events as a view of the core/v1 Events, as kube-apiserver serves them.

Upstream stores one Event; both API groups read and write it, converted field by field
(`pkg/apis/events/v1/conversion.go`): `involvedObject` is `regarding`, `message` is `note`,
`reportingComponent` is `reportingController`, `source`, `firstTimestamp`, `lastTimestamp` and
`count` are the `deprecated*` fields. So an Event the controller writes through core/v1 is in
`kubectl get events.events.k8s.io` too, and one written through events.k8s.io/v1 is in
`kubectl get events`. The store keeps the core/v1 shape; these two functions convert.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim.objects import Obj

# core/v1 field -> events.k8s.io/v1 field; fields of the same name in both are copied as they are.
_RENAMED = {
    "involvedObject": "regarding",
    "message": "note",
    "reportingComponent": "reportingController",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
}
_SHARED = ("eventTime", "series", "reportingInstance", "action", "reason", "related", "type")


def to_events_v1(core: Obj) -> Obj:
    """A stored core/v1 Event as events.k8s.io/v1 shows it."""
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": core.get("metadata", {}),
    }
    for name in _SHARED:
        if name in core:
            out[name] = core[name]
    for old, new in _RENAMED.items():
        if old in core:
            out[new] = core[old]
    return out


def to_core(event: Obj) -> Obj:
    """An events.k8s.io/v1 Event as the core/v1 Event the store keeps."""
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": event.get("metadata", {}),
    }
    for name in _SHARED:
        if name in event:
            out[name] = event[name]
    for old, new in _RENAMED.items():
        if new in event:
            out[old] = event[new]
    return out
