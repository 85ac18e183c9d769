"""KAITO Workspaces (`kaito.sh/v1beta1`) as the doctor reads them: whether a Workspace is a preset
or a template one, the tolerations its template sets, and which workload KAITO made for it. Pure:
parsed from the API's JSON, no client models.

What KAITO does with them (kaito-project/kaito at 056b8280): for an inference Workspace its
workspace controller creates a StatefulSet named after it (a Deployment before v0.8.0), whose
controller owner reference is the Workspace. A preset Workspace's pods get KAITO's own
tolerations only (`defaultTolerations`: `nvidia.com/gpu`, `sku=gpu` and, from v0.10.0 with
`cloudProviderName: azure`, the AKS spot taint); the Workspace has no field for more. A template
Workspace's pods get its `inference.template` tolerations followed by the same defaults
(`GenerateManifestWithPodTemplate`), but only when the StatefulSet is created: a later change of
the template is not carried to the StatefulSet ("TODO: handle update" in
`workspace_controller.go`). Note that `resource` and `inference` are top-level fields of a
Workspace, not under `spec`.

Not a model of KAITO: tuning Workspaces (Jobs), RAG engines and InferenceSets are not read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rebalancer.controller.model import WorkloadInfo

GROUP = "kaito.sh"
API_VERSION = "kaito.sh/v1beta1"
WORKSPACES = "/apis/kaito.sh/v1beta1/workspaces"
# The first KAITO release whose pods tolerate the AKS spot taint on Azure (#1870, 4dc9815c).
SPOT_TOLERATION_SINCE = "v0.10.0"


@dataclass(frozen=True)
class WorkspaceInfo:
    namespace: str
    name: str
    uid: str
    preset: str  # the preset model's name; "" for a template Workspace
    template: bool  # `inference.template` is set: its tolerations reach a new StatefulSet
    template_tolerations: tuple[Mapping[str, Any], ...]  # as the Workspace's template has them

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> WorkspaceInfo:
        """Any shape is read, the fields that are not what KAITO writes as absent: a Workspace
        someone broke must not stop the doctor's run."""
        meta = _object(obj, "metadata")
        inference = _object(obj, "inference")
        template = inference.get("template")
        spec = _object(template, "spec") if isinstance(template, dict) else {}
        tolerations = spec.get("tolerations")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            preset=str(_object(inference, "preset").get("name", "")),
            template=isinstance(template, dict),
            template_tolerations=tuple(
                t
                for t in (tolerations if isinstance(tolerations, list) else [])
                if isinstance(t, dict)
            ),
        )


def made_by_kaito(workload: WorkloadInfo) -> bool:
    owner = workload.owner
    return owner is not None and owner.kind == "Workspace" and _group(owner.api_version) == GROUP


def workload_of(workspace: WorkspaceInfo, workloads: Sequence[WorkloadInfo]) -> WorkloadInfo | None:
    """The StatefulSet (or, before KAITO v0.8.0, the Deployment) KAITO made for the Workspace;
    None before KAITO has made it. A StatefulSet wins: KAITO migrates a Deployment to one."""
    mine = [
        w
        for w in workloads
        if made_by_kaito(w)
        and w.namespace == workspace.namespace
        and w.owner is not None
        and w.owner.name == workspace.name
    ]
    return min(mine, key=lambda w: w.kind != "StatefulSet", default=None)


def _object(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""
