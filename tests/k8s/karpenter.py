"""Real Karpenter on the real control plane: Karpenter core with its KWOK cloud provider
(`sigs.k8s.io/karpenter/kwok`, built by tests/cluster/build.sh with Azure's repair policy for
`PreemptionScheduled` added, tests/cluster/karpenter-kwok/main.go), which launches a NodeClaim as a
Node that start.sh's kwok keeps Ready, as AKS node auto-provisioning launches a VM.

Started once per session, by the first test that asks for it (the other k8s tests never pay for
it), with Karpenter's CRDs from the same module. It runs as the cluster admin (its own RBAC is not
what these tests are about) with leader election off.

Instance types: GPU sizes of 1 and 2 GPUs, offered as spot and on-demand in two zones (spot
cheaper, so Karpenter picks spot unless a pod requires on-demand), shaped like AKS GPU nodes; a
NodePool names the one size it launches.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from tests.controlplane import ROOT, ControlPlane, run_script
from tests.helpers import free_port
from tests.k8s.operator_process import OperatorProcess

CACHE = Path(os.environ.get("K8S_CACHE", ROOT / ".cache" / "k8s"))
BINARY = CACHE / "bin" / "karpenter-kwok"
CRDS = CACHE / "karpenter-crds.yaml"
GPU_SIZE = "Standard_NC24ads_A100_v4"
# Two GPUs a node: two replicas of one GPU fit one node, so consolidation can pack them.
TWO_GPU_SIZE = "Standard_NC48ads_A100_v4"
ZONES = ("eastus-1", "eastus-2")
PRICES = {"spot": 0.97, "on-demand": 3.67}  # per hour; only the order matters to Karpenter
NODE_CLASS = "default"


def instance_types() -> list[dict[str, Any]]:
    """The KWOK provider's instance-types file (kwok/cloudprovider/helpers.go
    InstanceTypeOptions): its offerings are what Karpenter chooses among."""
    return [
        {
            "name": size,
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {
                "cpu": str(24 * gpus), "memory": f"{220 * gpus}Gi", "pods": "110",
                "nvidia.com/gpu": str(gpus),
            },
            "offerings": [
                {
                    "Price": price * gpus,
                    "Available": True,
                    "Requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [kind]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                    ],
                }
                for kind, price in PRICES.items()
                for zone in ZONES
            ],
        }
        for size, gpus in ((GPU_SIZE, 1), (TWO_GPU_SIZE, 2))
    ]  # fmt: skip


class Karpenter(OperatorProcess):
    name: ClassVar[str] = "karpenter"

    def start(self, **settings: str) -> None:
        """Karpenter with these settings (its environment: FEATURE_GATES, ...) beside the rig's."""
        self.launch(
            [str(BINARY)],
            {
                **os.environ,
                "KUBECONFIG": str(self.plane.admin_kubeconfig),
                "DISABLE_LEADER_ELECTION": "true",
                "METRICS_PORT": str(free_port()),
                "HEALTH_PROBE_PORT": str(self.new_health_port()),
                "INSTANCE_TYPES_FILE_PATH": str(self.workdir / "instance-types.json"),
                "LOG_LEVEL": "debug",
                # Decide on a pending pod within a second, not after up to 10 s of batching.
                "BATCH_IDLE_DURATION": "500ms",
                "BATCH_MAX_DURATION": "2s",
                **settings,
            },
        )

    @contextlib.contextmanager
    def restarted(self, **settings: str) -> Iterator[Karpenter]:
        """Karpenter run with these settings for the block, then as the session runs it."""
        self.stop()
        self.start(**settings)
        try:
            yield self
        finally:
            self.stop()
            self.start()


def nodepool(
    name: str,
    *,
    capacity_types: list[str],
    taints: list[dict[str, str]],
    size: str = GPU_SIZE,
    zones: tuple[str, ...] = ZONES,
    consolidate_after: str = "5s",
) -> dict[str, Any]:
    """A GPU NodePool as NAP users write one (karpenter.sh/v1), for the KWOK node class: one
    size, in `zones`, consolidating empty and underused nodes `consolidate_after` their last
    pod change."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": NODE_CLASS,
                    },
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": capacity_types,
                        },
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": [size],
                        },
                        {
                            "key": "topology.kubernetes.io/zone",
                            "operator": "In",
                            "values": list(zones),
                        },
                    ],
                    "taints": taints,
                    # A do-not-disrupt pod would hold a deleted NodePool's node for ever.
                    "terminationGracePeriod": "30s",
                    "expireAfter": "Never",
                }
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": consolidate_after,
            },
        },
    }


NODE_CLASS_OBJECT = {
    "apiVersion": "karpenter.kwok.sh/v1alpha1",
    "kind": "KWOKNodeClass",
    "metadata": {"name": NODE_CLASS},
}


@contextlib.contextmanager
def running_karpenter(plane: ControlPlane, workdir: Path) -> Iterator[Karpenter]:
    """Karpenter's CRDs installed, Karpenter running until the end of the block."""
    # Built if missing (a no-op once built; scripts/test builds it while other tests run).
    run_script("build.sh", "karpenter", what="building Karpenter's KWOK provider")
    started = time.monotonic()
    # Server-side: the NodePool CRD is larger than client-side apply's annotation allows.
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    plane.kubectl(
        "wait", "--for", "condition=Established", "--timeout", "60s",
        "crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh",
        "crd/kwoknodeclasses.karpenter.kwok.sh",
    )  # fmt: skip
    (workdir / "instance-types.json").write_text(json.dumps(instance_types()))
    karpenter = Karpenter(plane, workdir)
    try:
        karpenter.start()
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(NODE_CLASS_OBJECT))
        print(f"karpenter: CRDs installed and ready in {time.monotonic() - started:.1f} s")
        yield karpenter
    finally:
        karpenter.stop()
