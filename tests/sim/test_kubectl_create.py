"""`kubectl create <kind>`, `create -f`, `apply -f` and `run` against both backends. kubectl
(1.32 and later) sends the bodies of its generator commands in protobuf and does not retry in
JSON after a 415; the emulator decodes them (rebalancer_sim/protobuf.py) and answers in JSON."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from .backend import Backend


async def _get(backend: Backend, *what: str) -> dict[str, Any]:
    code, out = await backend.kubectl("get", *what, "-o", "json")
    assert code == 0, out
    document: dict[str, Any] = json.loads(out)
    return document


async def test_kubectl_create_generators_send_protobuf_and_are_served(backend: Backend) -> None:
    code, out = await backend.kubectl(
        "create", "deployment", "web", "--image=nginx:1.27", "--replicas=0", "--port=8080", "-v=8"
    )
    assert code == 0, out
    assert "Content-Type: application/vnd.kubernetes.protobuf" in out  # what is under test
    assert out.strip().splitlines()[-1].endswith("deployment.apps/web created")
    deployment = await _get(backend, "deployment", "web")
    assert deployment["spec"]["replicas"] == 0  # a pointer: its zero is sent and kept
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("nginx", "nginx:1.27")
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert deployment["metadata"]["labels"] == {"app": "web"}
    assert deployment["spec"]["strategy"] == {  # sent empty, defaulted by the server
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }

    code, out = await backend.kubectl("create", "configmap", "settings", "--from-literal=a=b")
    assert (code, out.strip()) == (0, "configmap/settings created")
    assert (await _get(backend, "configmap", "settings"))["data"] == {"a": "b"}

    code, out = await backend.kubectl("create", "secret", "generic", "token", "--from-literal=p=q")
    assert (code, out.strip()) == (0, "secret/token created")
    secret = await _get(backend, "secret", "token")
    assert base64.b64decode(secret["data"]["p"]) == b"q"

    for name, flag, wanted in (
        ("by-count", "--max-unavailable=1", 1),
        ("by-share", "--min-available=50%", "50%"),
    ):
        code, out = await backend.kubectl("create", "pdb", name, "--selector=app=web", flag)
        assert (code, out.strip()) == (0, f"poddisruptionbudget.policy/{name} created")
        spec = (await _get(backend, "pdb", name))["spec"]
        assert wanted in (spec.get("maxUnavailable"), spec.get("minAvailable")), spec


async def test_kubectl_create_namespace(backend: Backend) -> None:
    name = f"{backend.namespace}-x"
    code, out = await backend.kubectl("create", "namespace", name)
    try:
        assert (code, out.strip()) == (0, f"namespace/{name} created")
        namespace = await _get(backend, "namespace", name)
        assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": name}
    finally:
        await backend.kubectl("delete", "namespace", name, "--wait=false")


async def test_kubectl_create_f_apply_f_and_run(backend: Backend, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\ndata:\n  k: one\n")
    code, out = await backend.kubectl("create", "-f", str(manifest))
    assert (code, out.strip()) == (0, "configmap/m created")
    manifest.write_text(manifest.read_text().replace("one", "two"))
    code, out = await backend.kubectl("apply", "-f", str(manifest))
    assert code == 0 and out.strip().endswith("configmap/m configured"), out
    assert (await _get(backend, "configmap", "m"))["data"] == {"k": "two"}
    code, out = await backend.kubectl("run", "one", "--image=busybox:1.36", "--restart=Never")
    assert (code, out.strip()) == (0, "pod/one created")
    pod = await _get(backend, "pod", "one")
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"
