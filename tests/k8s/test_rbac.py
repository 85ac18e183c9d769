"""A permission the chart forgot fails the tests: the real authorizer refuses the call and the rig
finds the refusal in the process's log (tests/k8s/rig.py checks every test's logs this way)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.k8s.rig import RELEASE, RELEASE_NAMESPACE, KubeRig

pytestmark = pytest.mark.k8s


async def test_a_controller_without_a_permission_it_needs_is_caught(rig: KubeRig) -> None:
    role = json.loads(
        rig.plane.kubectl(
            "get", "clusterrole", f"{RELEASE}-spot-rebalancer-controller", "-o", "json"
        )
    )
    # Everything but patching Deployments, which the surge does.
    rules = role["rules"]
    (deployments,) = [r for r in rules if r["resources"] == ["deployments"]]
    deployments["verbs"].remove("patch")
    reduced = "reduced-controller"
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": reduced, "namespace": RELEASE_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": reduced}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": reduced},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reduced},
         "subjects": [{"kind": "ServiceAccount", "name": reduced, "namespace": RELEASE_NAMESPACE}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": reduced, "namespace": RELEASE_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": f"{RELEASE}-spot-rebalancer-controller"},
         "subjects": [{"kind": "ServiceAccount", "name": reduced, "namespace": RELEASE_NAMESPACE}]},
    ]  # fmt: skip
    rig.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    try:
        kubeconfig = rig.plane.token_kubeconfig(
            rig.workdir / "reduced.kubeconfig", RELEASE_NAMESPACE, reduced
        )
        await rig.deploy()
        rig.start_agents()
        rig.start_controller(REBALANCER_KUBECONFIG=str(kubeconfig))
        await rig.until_ready()
        doomed = sorted(p["spec"]["nodeName"] for p in rig.pods())[0]
        rig.preempt(doomed, notice_seconds=30)
        rig.refusals_expected = True
        refused = await rig.wait_for(rig.forbidden, timeout=20, what="the surge refused")
        assert any('cannot patch resource \\"deployments\\"' in line for line in refused), refused
    finally:
        rig.stop_all()  # before its permissions go, or the refusals are of the clean-up's making
        rig.plane.kubectl(
            "delete", "--ignore-not-found", "-n", RELEASE_NAMESPACE,
            f"serviceaccount/{reduced}", f"rolebinding/{reduced}",
        )  # fmt: skip
        rig.plane.kubectl(
            "delete",
            "--ignore-not-found",
            f"clusterrole/{reduced}",
            f"clusterrolebinding/{reduced}",
        )
