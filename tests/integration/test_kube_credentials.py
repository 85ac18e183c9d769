"""KubeClient's credentials over real HTTP(S) on 127.0.0.1: kubeconfigs as kubectl and the test
control plane write them, a pod's service account, and an exec plugin (delegated to
kubernetes_asyncio). The server reports what it received: the Authorization header, the
User-Agent and the client certificate's CN."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rebalancer.kube.client import KubeClient
from rebalancer.kube.credentials import KubeConfigError, in_cluster
from rebalancer.kube.errors import Unavailable
from tests.helpers import serve
from tests.tls import ThrowawayCA

PATH = "/api/v1/nodes/n1"


def app() -> web.Application:
    async def node(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))
        return web.json_response(
            {
                "authorization": request.headers.get("Authorization", ""),
                "userAgent": request.headers.get("User-Agent", ""),
                "clientCN": subject.get("commonName", ""),
            }
        )

    application = web.Application()
    application.router.add_get(PATH, node)
    return application


@pytest.fixture(scope="module")
def ca() -> ThrowawayCA:
    return ThrowawayCA()


def server_context(ca: ThrowawayCA, names: tuple[str, ...] = ()) -> ssl.SSLContext:
    """Serving for 127.0.0.1 (or only `names`); asks for a client certificate of this CA."""
    context = ca.server_context(list(names), [] if names else ["127.0.0.1"])
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=ca.pem.decode())
    return context


@pytest.fixture
async def https(ca: ThrowawayCA) -> AsyncIterator[str]:
    async with serve(app(), ssl_context=server_context(ca)) as url:
        yield url


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [
                    {"name": "other", "context": {"cluster": "missing", "user": "u"}},
                    {"name": "main", "context": {"cluster": "c", "user": "u"}},
                ],
                "current-context": "main",
            }
        )
    )
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def get(path: Path | str, context: str | None = None, **options: Any) -> dict[str, Any]:
    client = await KubeClient.connect(str(path), context=context, **options)
    try:
        answer: dict[str, Any] = await client.request("GET", PATH)
        return answer
    finally:
        await client.close()


async def test_a_token_over_http_and_the_user_agent(tmp_path: Path) -> None:
    async with serve(app()) as url:
        config = kubeconfig(tmp_path / "kc", {"server": url + "/"}, {"token": "t0k3n"})
        seen = await get(config, user_agent="spot-rebalancer/0 (controller; c-0)")
    assert seen["authorization"] == "Bearer t0k3n"
    assert seen["userAgent"] == "spot-rebalancer/0 (controller; c-0)"


async def test_client_certificate_and_ca_as_data(
    tmp_path: Path, ca: ThrowawayCA, https: str
) -> None:
    cert, key = ca.issue_client("kubernetes-admin")
    cluster = {"server": https, "certificate-authority-data": b64(ca.pem)}
    user = {"client-certificate-data": b64(cert), "client-key-data": b64(key)}
    seen = await get(kubeconfig(tmp_path / "kc", cluster, user))
    assert (seen["clientCN"], seen["authorization"]) == ("kubernetes-admin", "")


async def test_files_relative_to_the_kubeconfig(
    tmp_path: Path, ca: ThrowawayCA, https: str
) -> None:
    cert, key = ca.issue_client("system:node:n1")
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(ca.pem)
    (tmp_path / "pki" / "node.crt").write_bytes(cert)
    (tmp_path / "pki" / "node.key").write_bytes(key)
    cluster = {"server": https, "certificate-authority": "pki/ca.crt"}
    user = {"client-certificate": "pki/node.crt", "client-key": "pki/node.key"}
    seen = await get(kubeconfig(tmp_path / "kc", cluster, user))
    assert seen["clientCN"] == "system:node:n1"


async def test_an_unknown_server_certificate_is_refused_unless_told_to_skip(
    tmp_path: Path, https: str
) -> None:
    config = kubeconfig(tmp_path / "kc", {"server": https}, {"token": "t"})
    with pytest.raises(Unavailable, match="certificate"):
        await get(config)
    insecure = {"server": https, "insecure-skip-tls-verify": True}
    seen = await get(kubeconfig(tmp_path / "kc2", insecure, {"token": "t"}))
    assert seen["authorization"] == "Bearer t"


async def test_tls_server_name(tmp_path: Path, ca: ThrowawayCA) -> None:
    context = server_context(ca, names=("kubernetes.default.svc",))
    async with serve(app(), ssl_context=context) as url:
        cluster = {"server": url, "certificate-authority-data": b64(ca.pem)}
        with pytest.raises(Unavailable):
            await get(kubeconfig(tmp_path / "kc", cluster, {"token": "t"}))
        cluster["tls-server-name"] = "kubernetes.default.svc"
        seen = await get(kubeconfig(tmp_path / "kc", cluster, {"token": "t"}))
    assert seen["authorization"] == "Bearer t"


async def test_basic_auth(tmp_path: Path) -> None:
    async with serve(app()) as url:
        user = {"username": "admin", "password": "s3cret"}
        seen = await get(kubeconfig(tmp_path / "kc", {"server": url}, user))
    assert seen["authorization"] == f"Basic {b64(b'admin:s3cret')}"


async def test_the_context_chosen_and_clear_errors(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kc", {"server": "http://127.0.0.1:1"}, {"token": "t"})
    with pytest.raises(KubeConfigError, match="no cluster named 'missing'"):
        await get(config, context="other")
    with pytest.raises(KubeConfigError, match="no context named 'nope'"):
        await get(config, context="nope")
    with pytest.raises(KubeConfigError, match="No such file"):
        await get(tmp_path / "absent")
    broken = kubeconfig(tmp_path / "kc2", {"server": "https://h"}, {"client-key-data": "%%"})
    with pytest.raises(KubeConfigError, match="client-key-data is not base64"):
        await get(broken)


async def test_in_cluster_rereads_a_rotated_token(
    tmp_path: Path, ca: ThrowawayCA, https: str
) -> None:
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "ca.crt").write_bytes(ca.pem)
    (folder / "token").write_text("first\n")
    port = https.rsplit(":", 1)[1]
    credentials = in_cluster(
        {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}, folder
    )
    assert credentials.server == f"https://127.0.0.1:{port}"
    client = KubeClient.over(credentials)
    try:
        assert (await client.request("GET", PATH))["authorization"] == "Bearer first"
        # kubelet's rotation: the new token written aside, then swapped in.
        (folder / "token.new").write_text("second\n")
        (folder / "token.new").replace(folder / "token")
        assert (await client.request("GET", PATH))["authorization"] == "Bearer second"
    finally:
        await client.close()
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster({}, folder)


async def test_an_exec_plugin_goes_through_kubernetes_asyncio(tmp_path: Path) -> None:
    """kubelogin and the like: an ExecCredential printed by a program."""
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            """
            import json
            print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1",
                              "kind": "ExecCredential", "status": {"token": "from-exec"}}))
            """
        )
    )
    plugin.chmod(0o755)
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    async with serve(app()) as url:
        seen = await get(kubeconfig(tmp_path / "kc", {"server": url}, exec_user))
    assert seen["authorization"] == "Bearer from-exec"


def test_the_agent_and_controller_load_no_generated_client(tmp_path: Path) -> None:
    """The memory of issue 20: kubernetes_asyncio imports its whole generated client (about
    37 MB). A kubeconfig with a token and in-cluster credentials need none of it."""
    config = kubeconfig(tmp_path / "kc", {"server": "http://127.0.0.1:1"}, {"token": "t"})
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text("t")
    (folder / "ca.crt").write_bytes(ThrowawayCA().pem)
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        import rebalancer.agent.main, rebalancer.controller.main
        from rebalancer.kube.client import KubeClient
        from rebalancer.kube import credentials

        async def main():
            await (await KubeClient.connect({str(config)!r})).close()
            await KubeClient.over(credentials.in_cluster(
                {{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}},
                credentials.Path({str(folder)!r}))).close()

        asyncio.run(main())
        print(sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
