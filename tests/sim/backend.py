"""One API server under test: the emulator or the real control plane (issue 7).

A conformance test gets a `Backend` and talks to it only through the API (HTTP, kubernetes_asyncio
or kubectl), in a namespace of its own, so the same test body runs against both and every
difference is a failing test. On the real cluster, which other tests share, a test never touches
the AKS-shaped nodes: Nodes it writes to are its own (`backend.create_node`), and everything it
made is deleted at the end, its pods waited for.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s

from tests.helpers import KUBECTL

JSON = "application/json"
CONFORMANCE_TAINT = "conformance.spot-rebalancer.io/owner"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


async def eventually(
    predicate: Callable[[], Any], *, within: float = 5.0, message: str = "condition"
) -> Any:
    """Poll a condition in real time with a bounded timeout (never a sleep-as-assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {message}")
        await asyncio.sleep(0.02)


def namespace_for(test_name: str) -> str:
    """A unique, valid namespace name that still says which test made it."""
    stem = "".join(c if c.isalnum() else "-" for c in test_name.lower()).strip("-")
    return f"c-{stem[:40].strip('-')}-{uuid.uuid4().hex[:6]}"


def kubeconfig_in(source: Path, target: Path, namespace: str) -> Path:
    """A copy of `source` whose contexts default to `namespace` (what kubectl -n would do)."""
    config = yaml.safe_load(source.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    target.write_text(yaml.safe_dump(config))
    return target


@dataclass
class Backend:
    name: str  # "emulator" | "real"
    server: str
    kubeconfig: Path  # the admin's, defaulting to `namespace`
    namespace: str
    session: aiohttp.ClientSession  # authenticated as the admin
    api: k8s.ApiClient
    ssl_context: ssl.SSLContext | None = None
    _nodes: list[str] = field(default_factory=list)

    @property
    def real(self) -> bool:
        return self.name == "real"

    # ---- plain HTTP ----------------------------------------------------------------------------

    async def http(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """One request; the body parsed as JSON when it is JSON, else text."""
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        async with self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers={"Content-Type": content_type},
            ssl=self.ssl_context if self.ssl_context is not None else True,
        ) as response:
            text = await response.text()
            try:
                payload = json.loads(text)
            except ValueError:
                payload = text
            return response.status, payload, dict(response.headers)

    async def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request that must succeed (2xx): its body."""
        status, body, _ = await self.http(method, path, **kwargs)
        assert 200 <= status < 300, f"{method} {path}: {status} {body}"
        return body

    def ns_path(self, plural: str, name: str = "", *, group: str = "") -> str:
        """The URL path of a namespaced resource (collection or object) in the test namespace;
        `group` is a group/version ("apps/v1"), none for the core group."""
        prefix = f"/apis/{group}" if group else "/api/v1"
        suffix = f"/{name}" if name else ""
        return f"{prefix}/namespaces/{self.namespace}/{plural}{suffix}"

    async def create(self, plural: str, body: dict[str, Any], *, group: str = "") -> Any:
        return await self.ok("POST", self.ns_path(plural, group=group), body=body)

    # ---- kubectl -------------------------------------------------------------------------------

    async def kubectl(self, *args: str, limit_seconds: float = 30.0) -> tuple[int, str]:
        """The real kubectl as the admin, in the test namespace: exit code and output."""
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), HOME="/tmp")
        process = await asyncio.create_subprocess_exec(
            KUBECTL,
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), limit_seconds)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        return process.returncode or 0, output.decode()

    # ---- objects the tests build on ----------------------------------------------------------

    async def pods(self, **params: str) -> list[dict[str, Any]]:
        listed = await self.ok("GET", self.ns_path("pods"), params=params)
        return list(listed["items"])

    async def ready_pods(self, selector: str) -> list[dict[str, Any]]:
        """Pods matching `selector` that are Ready and not terminating."""
        return [
            pod
            for pod in await self.pods(labelSelector=selector)
            if not pod["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod.get("status", {}).get("conditions") or []
            )
        ]

    async def wait_ready(self, selector: str, count: int, *, within: float = 20) -> list[Any]:
        async def ready() -> list[Any]:
            pods = await self.ready_pods(selector)
            return pods if len(pods) == count else []

        result: list[Any] = await eventually(
            ready, within=within, message=f"{count} ready pods {selector}"
        )
        return result

    async def create_node(
        self, suffix: str, *, run_pods: bool = False, labels: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """A Node of this test's own, tainted so that only this test's pods go there.

        With `run_pods`, kwok (on the real cluster) runs its pods as it does the AKS-shaped
        nodes' (the emulator's kubelets run every node's pods). Deleted at the end of the test.
        """
        name = f"{self.namespace}-{suffix}"
        annotations = {KWOK_ANNOTATION: "fake"} if run_pods else {}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": annotations,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {
                "taints": [
                    {"key": CONFORMANCE_TAINT, "value": self.namespace, "effect": "NoSchedule"}
                ]
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
                ],
            },
        }
        created: dict[str, Any] = await self.ok("POST", "/api/v1/nodes", body=node)
        self._nodes.append(name)
        return created

    def on_own_node(self, node_name: str) -> dict[str, Any]:
        """Pod spec fields that put a pod on one of this test's nodes (and nowhere else)."""
        return {
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "tolerations": [
                {"key": CONFORMANCE_TAINT, "operator": "Equal", "value": self.namespace}
            ],
        }

    # ---- set-up and clean-up -------------------------------------------------------------------

    async def open_namespace(self) -> None:
        await self.ok("POST", "/api/v1/namespaces", body={"metadata": {"name": self.namespace}})
        if self.real:
            # The real controller-manager adds a `default` ServiceAccount (pods cannot be
            # created without it) and `kube-root-ca.crt`: wait for both so that they are not
            # events in the middle of a test. The emulator has neither (docs/emulator.md).
            for path in (
                self.ns_path("serviceaccounts", "default"),
                self.ns_path("configmaps", "kube-root-ca.crt"),
            ):
                await eventually(lambda path=path: self._exists(path), within=10, message=path)

    async def _exists(self, path: str) -> bool:
        status, _, _ = await self.http("GET", path)
        return status == 200

    async def close(self) -> None:
        """Delete what the test made; wait until its pods are gone."""
        await self.http("DELETE", f"/api/v1/namespaces/{self.namespace}")
        # Finalizers a test left would hold the namespace (and its pods) forever.
        for plural in ("pods", "configmaps", "podtemplates"):
            listed = await self.ok("GET", self.ns_path(plural))
            for item in listed["items"]:
                if item["metadata"].get("finalizers"):
                    await self.http(
                        "PATCH",
                        self.ns_path(plural, item["metadata"]["name"]),
                        body={"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
        await self.http("DELETE", self.ns_path("pods"), body={"gracePeriodSeconds": 0})

        async def no_pods() -> bool:
            return not (await self.ok("GET", self.ns_path("pods")))["items"]

        await eventually(no_pods, within=30, message=f"pods of {self.namespace} gone")
        for name in self._nodes:
            await self.http("DELETE", f"/api/v1/nodes/{name}")
