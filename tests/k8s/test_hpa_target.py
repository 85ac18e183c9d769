"""An availability target on a Deployment that kube-controller-manager's own HPA controller
scales, on an External metric the test serves (an `external.metrics.k8s.io` APIService, as a
metrics adapter such as KEDA's registers one, reached through the API server's aggregator).

Real here: the HPA controller's arithmetic and the status JSON it writes (`currentMetrics`,
`currentReplicas`), the aggregator's proxying, the chart's RBAC for the HPA's bounds. The
controller computes N from that status (`rebalancer/controller/hpa_count.py`); the test checks
it against the HPA itself: the count the HPA chose alone before the target and after it, for
the same metric, is the N the controller kept.

The metric: `queue`, target AverageValue 10 per replica (so N = ceil(queue / 10)); the HPA
scales llm from 1 to 8 with no scale-down window (`behavior.scaleDown`: 0 s, so a fall is seen
within a sync). Not real: the adapter is an HTTPS server in the test process (behind a Service
and an EndpointSlice, as the webhook's in test_webhook.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from aiohttp import web

from rebalancer import names
from rebalancer.controller.records import Spare
from rebalancer.controller.webhook_tls import issue, server_context
from tests.helpers import free_port
from tests.k8s.rig import RELEASE_NAMESPACE, KubeRig
from tests.k8s.test_target import DEPLOYMENT, MERGE, TARGET
from tests.k8s.test_webhook import TEST_MANAGER, eventually, route

pytestmark = pytest.mark.k8s

GROUP_VERSION = "external.metrics.k8s.io/v1beta1"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
SERVICE = "test-external-metrics"
HPAS = "/apis/autoscaling/v2/namespaces/inference/horizontalpodautoscalers"


@contextlib.asynccontextmanager
async def external_metrics(rig: KubeRig, values: dict[str, float]) -> AsyncIterator[None]:
    """Serve `values` (metric -> value, changed by the test) as external metrics, registered
    with the API server's aggregator; everything removed after (an APIService left unavailable
    would break every client's discovery)."""

    async def resources(_: web.Request) -> web.Response:
        listed = [
            {"name": name, "singularName": "", "namespaced": True,
             "kind": "ExternalMetricValueList", "verbs": ["get"]}
            for name in sorted(values)
        ]  # fmt: skip
        return web.json_response(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
             "resources": listed}
        )  # fmt: skip

    async def metric(request: web.Request) -> web.Response:
        name = request.match_info["metric"]
        if name not in values:
            raise web.HTTPNotFound()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        item = {"metricName": name, "metricLabels": {}, "timestamp": stamp,
                "value": f"{values[name]:g}"}  # fmt: skip
        return web.json_response(
            {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {},
             "items": [item]}
        )  # fmt: skip

    app = web.Application()
    app.router.add_get(f"/apis/{GROUP_VERSION}", resources)
    app.router.add_get(f"/apis/{GROUP_VERSION}/namespaces/{{namespace}}/{{metric}}", metric)
    material = issue([f"{SERVICE}.{RELEASE_NAMESPACE}.svc"], dt.datetime.now(dt.UTC))
    runner = web.AppRunner(app)
    await runner.setup()
    way, port = route(), free_port()
    await web.TCPSite(runner, way.listen, port, ssl_context=server_context(material)).start()
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": SERVICE, "namespace": RELEASE_NAMESPACE},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{SERVICE}-host", "namespace": RELEASE_NAMESPACE, "labels": {
             "kubernetes.io/service-name": SERVICE,
             "endpointslice.kubernetes.io/managed-by": TEST_MANAGER}},
         "addressType": way.address_type,
         "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
         "endpoints": [{"addresses": [way.address], "conditions": {"ready": True}}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": API_SERVICE},
         "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1",
                  "service": {"namespace": RELEASE_NAMESPACE, "name": SERVICE, "port": 443},
                  "insecureSkipTLSVerify": True, "groupPriorityMinimum": 100,
                  "versionPriority": 100}},
    ]  # fmt: skip
    plane = rig.plane
    try:
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

        async def available() -> bool:
            service = await rig.api.request(
                "GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}"
            )
            conditions = (service.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

        await eventually(available, timeout=30, what="the external metrics APIService Available")
        yield
    finally:
        plane.kubectl(
            "delete", "--ignore-not-found", f"apiservice/{API_SERVICE}",
            "-n", RELEASE_NAMESPACE, f"service/{SERVICE}", f"endpointslice/{SERVICE}-host",
        )  # fmt: skip
        await runner.cleanup()


async def test_the_targets_n_is_the_count_the_real_hpa_chooses_and_its_bounds_hold_the_spares(
    rig: KubeRig,
) -> None:
    api = rig.api
    values = {"queue": 60.0}
    rig.start_controller(
        REBALANCER_TARGET_FRESH_SECONDS="0", REBALANCER_TARGET_SPOT_PRICE_SHARE="0.2"
    )
    await rig.deploy(replicas=1, startup_seconds=2)
    async with external_metrics(rig, values):
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "llm", "namespace": "inference"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
                "minReplicas": 1,
                "maxReplicas": 8,
                "metrics": [{"type": "External", "external": {
                    "metric": {"name": "queue"},
                    "target": {"type": "AverageValue", "averageValue": "10"}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
            },
        }  # fmt: skip
        # Created as a GitOps tool would, under a field manager of its own.
        await api.request("POST", HPAS, hpa, params={"fieldManager": "gitops"})
        # Alone, the HPA scales llm to ceil(60 / 10) = 6.
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 6, timeout=45, what="the HPA's 6"
        )
        await api.request(
            "PATCH", DEPLOYMENT, {"metadata": {"annotations": TARGET}}, content_type=MERGE
        )

        def spare() -> Spare | None:
            text = (rig.deployment()["metadata"].get("annotations") or {}).get(names.SPARE_RECORD)
            return Spare.from_json(text) if text else None

        def held(base: int) -> bool:  # the plan for N = base applied, the HPA's bounds with it
            record = spare()
            return record is not None and record.base == base and rig.deployment()["spec"][
                "replicas"] == record.base + record.added  # fmt: skip

        await rig.wait_for(lambda: held(6), timeout=30, what="the plan for N = 6")
        record = spare()
        assert record is not None and record.added > 0
        raised = await api.request("GET", f"{HPAS}/llm")
        total = record.base + record.added
        assert raised["spec"]["minReplicas"] == total
        assert raised["spec"]["maxReplicas"] == max(8, total)
        saved = raised["metadata"]["annotations"][names.HPA_ORIGINAL_ANNOTATION]
        assert saved.startswith("1,8 seal="), saved
        # The API server names the manager of the bounds after the controller's user agent:
        # what a GitOps tool is told to leave alone (docs/install.md, "With Argo CD or Flux").
        owners = {
            entry["manager"]
            for entry in raised["metadata"]["managedFields"]
            if "f:minReplicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        }
        assert owners == {"spot-rebalancer"}, raised["metadata"]["managedFields"]
        why = rig.deployment()["metadata"]["annotations"][names.TARGET_WHY]
        assert "; the HPA llm wants 6 (External queue " in why, why

        async def synced_at(count: int) -> bool:  # an HPA sync saw `count` replicas
            status = (await api.request("GET", f"{HPAS}/llm")).get("status") or {}
            return status.get("currentReplicas") == count

        await eventually(lambda: synced_at(total), timeout=40, what="an HPA sync at the plan")
        await rig.more_passes("controller-0", 2)
        assert held(6)  # the HPA's status over the spares still says 6: N stays

        values["queue"] = 30.0  # the HPA alone would want 3 (and shrink at once: window 0)
        await rig.wait_for(lambda: held(3), timeout=45, what="the plan for N = 3")
        await api.request(
            "PATCH", DEPLOYMENT,
            {"metadata": {"annotations": {names.AVAILABILITY_TARGET: None}}}, content_type=MERGE,
        )  # fmt: skip

        async def bounds_back() -> bool:
            now = await api.request("GET", f"{HPAS}/llm")
            annotations = now["metadata"].get("annotations") or {}
            bounds = (now["spec"]["minReplicas"], now["spec"]["maxReplicas"])
            return bounds == (1, 8) and names.HPA_ORIGINAL_ANNOTATION not in annotations

        await eventually(bounds_back, timeout=15, what="the HPA's own bounds back")
        # The bounds go back first (Step.SCALE_BACK), the record a moment later in the pass.
        await rig.wait_for(lambda: spare() is None, timeout=15, what="the record gone")
        # Alone again, the HPA takes the count to its own choice: the N the target kept.
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=45, what="the HPA's 3"
        )
