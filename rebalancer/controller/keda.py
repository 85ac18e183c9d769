"""KEDA's ScaledObjects: where the bounds of the HPA that KEDA makes are held.

KEDA's operator makes an HPA for each ScaledObject, owns it, and sets its spec back from the
ScaledObject's whenever the HPA changes (`updateHPAIfNeeded` in KEDA's controllers/keda/hpa.go),
so bounds raised on that HPA would start a fight the spares lose. Raised on the ScaledObject
(`minReplicaCount`, and `maxReplicaCount` when lower), KEDA writes them onto its HPA itself, and
the HPA holds the spares as any other. Only while the ScaledObject hands the count to the HPA:
one that scales to zero (a minimum of 0, an idle count) or is paused is left alone
(`ScaledObjectInfo.holdable`).

Pure: the snapshot joins each HPA with the ScaledObject that owns it, by name and uid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rebalancer.controller.model import ScaledObjectInfo, ScalerInfo

SCALEDOBJECTS = "/apis/keda.sh/v1alpha1/scaledobjects"
Key = tuple[str, str]


def held_through(
    scalers: Mapping[Key, ScalerInfo], scaled_objects: Mapping[Key, ScaledObjectInfo]
) -> dict[Key, ScalerInfo]:
    """Every HPA, with the bounds and our record of its ScaledObject in place of its own when
    KEDA owns it (`ScalerInfo.holder`); other HPAs as they are."""
    joined = {}
    for key, scaler in scalers.items():
        kind, _, name = scaler.owner.partition(" ")
        found = scaled_objects.get((scaler.namespace, name)) if kind == "ScaledObject" else None
        if found is None or (scaler.owner_uid and found.uid != scaler.owner_uid):
            joined[key] = scaler
            continue
        low, high = found.hpa_bounds
        joined[key] = replace(
            scaler,
            min_replicas=low,
            max_replicas=high,
            original=found.original,
            saved=found.original,  # unchecked until the seal is (seal.py), as an HPA's
            refused="",
            holder=found,
        )
    return joined
