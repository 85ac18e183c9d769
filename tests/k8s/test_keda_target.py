"""An availability target on a Deployment that KEDA scales, with KEDA's own operator
(tests/k8s/keda.py) and kube-controller-manager's HPA controller on the real control plane.

KEDA makes the HPA `keda-hpa-llm` for the ScaledObject `llm`, owns it, and sets its spec back from
the ScaledObject whenever it drifts; so the controller holds the spares on the ScaledObject
(`minReplicaCount`, and `maxReplicaCount` when lower, the originals sealed on it), KEDA writes
them onto its HPA, and the HPA holds the count (docs/targets.md, "With KEDA"). What this checks
against the real operator, which the loop test checks against the emulator's stand-in
(tests/loop/test_targets.py): the raise is accepted and copied, nothing fights over the count
for 45 s, and without the target the ScaledObject's own bounds come back, KEDA's HPA with them.

The ScaledObject: 3 to 8 replicas, one `cpu` trigger (Utilization, 50 %). No metrics server runs
here, so the HPA has no metric value: it keeps the count within its bounds and no more, and N
stays the Deployment's 3 (docs/targets.md, "With an HorizontalPodAutoscaler"). The plan for 3
replicas at 99.9 % is test_target.py's: with the owner's 3 Ready on spot (one per zone), 7 on
spot and 2 on on-demand while the spot spares are not Ready, 9 replicas. No spot capacity comes
here (three spot nodes, one GPU each), so 9 holds, above the ScaledObject's maximum: both bounds
are raised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.records import Spare
from tests.controlplane import ControlPlane
from tests.k8s.keda import Keda, running_keda
from tests.k8s.rig import ApiError, KubeRig
from tests.k8s.test_target import DEPLOYMENT, MERGE, TARGET, record
from tests.k8s.test_webhook import eventually

pytestmark = pytest.mark.k8s

SCALEDOBJECT = "/apis/keda.sh/v1alpha1/namespaces/inference/scaledobjects/llm"
HPA = "/apis/autoscaling/v2/namespaces/inference/horizontalpodautoscalers/keda-hpa-llm"
LOW, HIGH = 3, 8  # the ScaledObject's own bounds
STEADY_SECONDS = 45
HPA_UPDATED = "Updated HPA according to ScaledObject"  # KEDA's log line (controllers/keda/hpa.go)


@pytest.fixture(scope="session")
def keda(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keda]:
    with running_keda(control_plane, tmp_path_factory.mktemp("keda")) as running:
        yield running


def bounds(obj: dict[str, Any]) -> tuple[int, int]:
    spec = obj["spec"]
    if obj["kind"] == "ScaledObject":
        return spec["minReplicaCount"], spec["maxReplicaCount"]
    return spec["minReplicas"], spec["maxReplicas"]


def writers(obj: dict[str, Any]) -> set[str]:
    """The field managers that wrote the object (the controller's is `spot-rebalancer`)."""
    return {entry["manager"] for entry in obj["metadata"].get("managedFields") or []}


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


async def test_with_real_keda_the_scaledobjects_bounds_hold_the_spares(
    rig: KubeRig, keda: Keda
) -> None:
    api = rig.api
    rig.start_controller(
        REBALANCER_TARGET_FRESH_SECONDS="0", REBALANCER_TARGET_SPOT_PRICE_SHARE="0.2"
    )
    await rig.deploy(replicas=LOW, startup_seconds=2)
    await rig.until_ready(replicas=LOW)
    scaled_object = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "llm", "namespace": "inference"},
        "spec": {
            "scaleTargetRef": {"name": "llm"},
            "minReplicaCount": LOW,
            "maxReplicaCount": HIGH,
            "triggers": [{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "50"}}],
        },
    }
    await api.request("POST", SCALEDOBJECT.rsplit("/", 1)[0], scaled_object)
    try:
        # KEDA makes its HPA, owned by the ScaledObject, with the ScaledObject's bounds.
        made = await eventually(
            lambda: api.request("GET", HPA), timeout=30, what="KEDA's HPA keda-hpa-llm"
        )
        (owner,) = made["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner.get("controller")) == (
            "ScaledObject", "llm", True
        )  # fmt: skip
        assert bounds(made) == (LOW, HIGH)

        async def ready() -> bool:  # KEDA's Ready condition, its HPA named in the status
            status = (await api.request("GET", SCALEDOBJECT)).get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            return conditions.get("Ready") == "True" and status.get("hpaName") == "keda-hpa-llm"

        await eventually(ready, timeout=30, what="the ScaledObject Ready")

        await api.request(
            "PATCH", DEPLOYMENT, {"metadata": {"annotations": TARGET}}, content_type=MERGE
        )
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 9, timeout=30, what="9 replicas"
        )
        assert record(rig) == Spare(base=LOW, added=6, spot=7)
        total = 9
        # Held on the ScaledObject: both bounds raised (9 is above its 8), its own sealed on it.
        held = await api.request("GET", SCALEDOBJECT)
        assert bounds(held) == (total, total)
        saved = annotations_of(held)[names.HPA_ORIGINAL_ANNOTATION]
        assert saved.startswith(f"{LOW},{HIGH} seal="), saved
        why = rig.deployment()["metadata"]["annotations"][names.TARGET_WHY]
        assert f"; the HPA keda-hpa-llm: no metric value, kept at {LOW}" in why, why

        # KEDA copies the raised bounds onto its HPA (and the ScaledObject's annotations with
        # them, the sealed record among them).
        async def copied() -> dict[str, Any] | None:
            hpa = await api.request("GET", HPA)
            return hpa if bounds(hpa) == (total, total) else None

        raised = await eventually(copied, timeout=30, what="KEDA's HPA at the raised bounds")
        assert annotations_of(raised).get(names.HPA_ORIGINAL_ANNOTATION) == saved

        # No fight: for a while, neither KEDA's HPA nor the Deployment's count moves, KEDA
        # updates its HPA no more (it logs each update it makes), and no replica is replaced (a
        # count set lower and back between two looks would have removed one and made another).
        # Not the Deployment's generation: our records on it are annotations, which move it.
        await rig.wait_for(lambda: len(rig.pods()) == total, timeout=15, what="9 replicas made")
        # KEDA copies a change in two updates of one reconcile (spec, then labels and
        # annotations), milliseconds apart: counted once a controller pass later, after both.
        await rig.more_passes("controller-0", 1)
        updates = keda.log().count(HPA_UPDATED)
        replicas = {p["metadata"]["name"] for p in rig.pods()}
        deadline = time.monotonic() + STEADY_SECONDS
        while time.monotonic() < deadline:
            hpa = await api.request("GET", HPA)
            scaled = await api.request("GET", SCALEDOBJECT)
            assert hpa["spec"] == raised["spec"], hpa["spec"]
            assert bounds(scaled) == (total, total), scaled["spec"]
            for _ in range(5):
                assert rig.deployment()["spec"]["replicas"] == total
                assert {p["metadata"]["name"] for p in rig.pods()} == replicas
                await asyncio.sleep(0.1)
            keda.check_running()
            rig.check_running()
        assert keda.log().count(HPA_UPDATED) == updates
        assert "spot-rebalancer" not in writers(hpa), writers(hpa)  # KEDA's HPA: never ours
        await rig.more_passes("controller-0", 2)  # it planned meanwhile, and still holds 9
        assert record(rig) == Spare(base=LOW, added=6, spot=7)

        # Without the target: the ScaledObject's own bounds back, and KEDA's HPA with them.
        await api.request(
            "PATCH", DEPLOYMENT,
            {"metadata": {"annotations": {names.AVAILABILITY_TARGET: None}}}, content_type=MERGE,
        )  # fmt: skip

        async def put_back() -> bool:
            scaled = await api.request("GET", SCALEDOBJECT)
            hpa = await api.request("GET", HPA)
            return (
                bounds(scaled) == bounds(hpa) == (LOW, HIGH)
                and names.HPA_ORIGINAL_ANNOTATION not in annotations_of(scaled)
                and names.HPA_ORIGINAL_ANNOTATION not in annotations_of(hpa)
            )

        await eventually(put_back, timeout=30, what="the ScaledObject's own bounds back")
        # The record goes in a write of its own, after the bounds (retried on a conflict).
        await rig.wait_for(lambda: record(rig) is None, timeout=10, what="the record removed")
        # The count is the HPA's again: 9 is above its maximum, so it scales to 8, and no lower:
        # it has no metric value here to go by (with one, it would go to its own choice).
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == HIGH, timeout=30, what="the HPA's 8"
        )
    finally:
        await api.absent(SCALEDOBJECT)

        async def gone() -> bool:  # KEDA's finalizer let it go; the HPA goes with it
            try:
                await api.request("GET", SCALEDOBJECT)
            except ApiError as error:
                if error.status == 404:
                    return True
                raise
            return False

        await eventually(gone, timeout=30, what="the ScaledObject deleted")
