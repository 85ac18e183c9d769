"""Real KEDA on the real control plane: KEDA's operator (`github.com/kedacore/keda/v2/cmd/operator`,
built by tests/cluster/build.sh), whose ScaledObject controller makes an HPA for each ScaledObject,
owns it, and sets it back from the ScaledObject whenever it drifts; kube-controller-manager's HPA
controller then scales the Deployment from that HPA, as on AKS with the KEDA add-on.

Started once per session, by the first test that asks for it (the other k8s tests never pay for
it), with KEDA's CRDs from the same module. It runs as a host process, as the cluster admin (its
own RBAC is not what these tests are about), with leader election off, watching every namespace.
Not run: KEDA's metrics adapter and admission webhooks (nothing here reads an External metric of
KEDA's, and a ScaledObject the tests write is valid). The operator's gRPC metrics service (for
that adapter) still starts, so it gets a throwaway certificate in its `--cert-dir`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from tests.controlplane import ROOT, ControlPlane, run_script
from tests.helpers import free_port
from tests.k8s.operator_process import OperatorProcess
from tests.tls import ThrowawayCA

CACHE = Path(os.environ.get("K8S_CACHE", ROOT / ".cache" / "k8s"))
BINARY = CACHE / "bin" / "keda-operator"
CRDS = CACHE / "keda-crds.yaml"
# Where KEDA's chart installs it; the operator reads Secrets of cluster-wide objects there.
NAMESPACE = "keda"
# The name KEDA's chart gives the operator's Service, in the metrics service's certificate.
SERVICE = f"keda-operator.{NAMESPACE}.svc"
CRD_NAMES = (
    "scaledobjects.keda.sh",
    "scaledjobs.keda.sh",
    "triggerauthentications.keda.sh",
    "clustertriggerauthentications.keda.sh",
)


class Keda(OperatorProcess):
    name: ClassVar[str] = "keda-operator"

    def start(self) -> None:
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        # ca.crt, tls.crt, tls.key: what KEDA's cert rotation would write into the cert dir.
        ca = ThrowawayCA("keda test CA")
        ca.write(certs, [SERVICE], ["127.0.0.1"])
        (certs / "ca.crt").write_bytes(ca.pem)
        self.launch(
            [
                str(BINARY),
                "--leader-elect=false",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{self.new_health_port()}",
                f"--metrics-service-bind-address=127.0.0.1:{free_port()}",
                f"--cert-dir={certs}",
                f"--ca-dir={certs}",
                "--zap-log-level=debug",
            ],
            {
                **os.environ,
                "KUBECONFIG": str(self.plane.admin_kubeconfig),
                "WATCH_NAMESPACE": "",  # every namespace
                "POD_NAMESPACE": NAMESPACE,
                "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
            },
        )


def established(plane: ControlPlane, crds: tuple[str, ...], timeout: float = 60) -> None:
    """Wait until the API server serves these CRDs. Polled, not `kubectl wait`: that fails at
    once ("<nil> is of the type <nil>") when it reads a CRD before its first status."""
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(plane.kubectl("get", "crd", *crds, "-o", "json"))["items"]
        waiting = [
            crd["metadata"]["name"]
            for crd in listed
            if not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            )
        ]
        if not waiting:
            return
        assert time.monotonic() < deadline, f"not Established in {timeout:.0f} s: {waiting}"
        time.sleep(0.2)


@contextlib.contextmanager
def running_keda(plane: ControlPlane, workdir: Path) -> Iterator[Keda]:
    """KEDA's CRDs installed, its operator running until the end of the block."""
    # Built if missing (a no-op once built; scripts/test builds it while other tests run).
    run_script("build.sh", "keda", what="building KEDA's operator")
    started = time.monotonic()
    # Server-side: the ScaledJob CRD is larger than client-side apply's annotation allows.
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    established(plane, CRD_NAMES)
    plane.kubectl("create", "namespace", NAMESPACE)
    keda = Keda(plane, workdir)
    try:
        keda.start()
        print(f"keda: CRDs installed and the operator ready in {time.monotonic() - started:.1f} s")
        yield keda
    finally:
        keda.stop()
