"""A real Kubernetes control plane (tests/cluster/) for the tests marked `k8s`, one per session.

kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok are built once by
`tests/cluster/build.sh` (scripts/test runs it before pytest) and started on 127.0.0.1 by
`start.sh`. A build or start that fails fails every test that needs the cluster: never a skip.
"""

from __future__ import annotations

import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import KUBECTL

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "cluster"


@dataclass(frozen=True)
class ControlPlane:
    state: Path
    server: str

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    @property
    def ca(self) -> Path:
        return self.state / "pki" / "ca.crt"

    def nodes(self) -> list[dict[str, Any]]:
        """The AKS-shaped nodes start.sh created, as it created them."""
        text = (self.state / "nodes.yaml").read_text()
        return [doc for doc in yaml.safe_load_all(text) if doc]

    def ssl_context(self) -> ssl.SSLContext:
        """TLS as the admin: the cluster's CA and the admin client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        pki = self.state / "pki"
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        return context

    def kubectl(self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
        """Run the real kubectl as the admin (or another kubeconfig); its stdout, or fail."""
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result.stdout

    def token_kubeconfig(
        self, path: Path, namespace: str, service_account: str, *, pod: str | None = None
    ) -> Path:
        """A kubeconfig that authenticates as a ServiceAccount (a TokenRequest, 1 h); with `pod`,
        the token is bound to that pod, as the kubelet's projected token is (the API server then
        names the pod's node in it)."""
        bound = ["--bound-object-kind", "Pod", "--bound-object-name", pod] if pod else []
        token = self.kubectl(
            "create", "token", service_account, "-n", namespace, "--duration", "1h", *bound
        ).strip()
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(self.ca),
                            },
                        }
                    ],
                    "users": [{"name": service_account, "user": {"token": token}}],
                    "contexts": [
                        {"name": "test", "context": {"cluster": "test", "user": service_account}}
                    ],
                    "current-context": "test",
                }
            )
        )
        return path


def run_script(script: str, *args: str, what: str) -> str:
    result = subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "KUBECTL": KUBECTL},
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"tests/cluster/{script} {' '.join(args)} failed ({what}), exit {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result.stdout


def start(state: Path) -> ControlPlane:
    """Build what is missing (a no-op once built), start the cluster into `state`. Karpenter
    is built by the tests that run it (`tests/k8s/karpenter.py`), so that the rest need not wait
    for it (scripts/test builds it with the control plane)."""
    run_script(
        "build.sh", "etcd", "kubernetes", "kwok", what="building the control plane from Go modules"
    )
    run_script("start.sh", str(state), what="starting the control plane")
    env = dict(
        line.removeprefix("export ").split("=", 1)
        for line in (state / "env").read_text().splitlines()
        if line.startswith("export ")
    )
    return ControlPlane(state=state, server=env["K8S_TEST_SERVER"])


def stop(plane: ControlPlane) -> None:
    """Stop every process; the state dir (logs, certificates) stays with pytest's tmp dirs."""
    subprocess.run(
        ["bash", str(SCRIPTS / "stop.sh"), str(plane.state)],
        capture_output=True,
        timeout=120,
        check=False,
    )
