"""The API resources the emulator serves: names, kinds, scopes, verbs and subresources.

One table drives URL routing, discovery documents and error messages, so a resource is added in
one place. It describes the resources; it stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    has_generation: bool = False  # metadata.generation bumped on spec changes
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """`pods`, `deployments.apps`: how upstream names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> str:
        """The store's name for the resource (unique across groups we serve)."""
        return self.qualified


VERBS = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
]

ALL: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), ("status",)),
    ResourceType("", "v1", "nodes", "Node", False, ("no",), ("status",)),
    ResourceType(
        "", "v1", "pods", "Pod", True, ("po",), ("status", "eviction"), categories=("all",)
    ),
    ResourceType("", "v1", "events", "Event", True, ("ev",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    # Where an admission webhook's serving certificate lives (the controller's TLS keeper).
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("", "v1", "podtemplates", "PodTemplate", True),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        ("status", "scale"),
        has_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        ("status", "scale"),
        has_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        ("status", "scale"),
        has_generation=True,
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        ("ds",),
        ("status",),
        has_generation=True,
        categories=("all",),
    ),
    ResourceType("apps", "v1", "controllerrevisions", "ControllerRevision", True, (), (), False),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        ("status",),
        has_generation=True,
    ),
    # Served, and scaled by the HPA controller (hpa.py); the rebalancer reads and patches them.
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        ("hpa",),
        ("status",),
        has_generation=True,
        categories=("all",),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    # Called on every Pod CREATE by admission.py, as kube-apiserver calls them.
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
        has_generation=True,
        categories=("api-extensions",),
    ),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, ("ev",)),
    # Karpenter's kinds (AKS node auto-provisioning), as its CRDs serve them; karpenter.py
    # launches NodeClaims and their Nodes for the NodePools.
    ResourceType(
        "karpenter.sh",
        "v1",
        "nodepools",
        "NodePool",
        False,
        ("np",),
        ("status",),
        has_generation=True,
        categories=("karpenter",),
    ),
    ResourceType(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        "NodeClaim",
        False,
        ("nc",),
        ("status",),
        has_generation=True,
        categories=("karpenter",),
    ),
    # KEDA's ScaledObject, as its CRD serves it (no categories: the CRD names none); keda.py
    # keeps an HPA per ScaledObject, as KEDA's operator does.
    ResourceType(
        "keda.sh",
        "v1alpha1",
        "scaledobjects",
        "ScaledObject",
        True,
        ("so",),
        ("status",),
        has_generation=True,
    ),
)

BY_KEY: dict[str, ResourceType] = {r.key: r for r in ALL}
BY_PATH: dict[tuple[str, str, str], ResourceType] = {(r.group, r.version, r.plural): r for r in ALL}

NAMESPACES = BY_KEY["namespaces"]
NODES = BY_KEY["nodes"]
PODS = BY_KEY["pods"]
EVENTS = BY_KEY["events"]
CONFIGMAPS = BY_KEY["configmaps"]
SECRETS = BY_KEY["secrets"]
PODTEMPLATES = BY_KEY["podtemplates"]
DEPLOYMENTS = BY_KEY["deployments.apps"]
REPLICASETS = BY_KEY["replicasets.apps"]
STATEFULSETS = BY_KEY["statefulsets.apps"]
DAEMONSETS = BY_KEY["daemonsets.apps"]
CONTROLLERREVISIONS = BY_KEY["controllerrevisions.apps"]
PDBS = BY_KEY["poddisruptionbudgets.policy"]
LEASES = BY_KEY["leases.coordination.k8s.io"]
HPAS = BY_KEY["horizontalpodautoscalers.autoscaling"]
EVENTS_V1 = BY_KEY["events.events.k8s.io"]
MUTATING_WEBHOOKS = BY_KEY["mutatingwebhookconfigurations.admissionregistration.k8s.io"]
NODEPOOLS = BY_KEY["nodepools.karpenter.sh"]
NODECLAIMS = BY_KEY["nodeclaims.karpenter.sh"]
SCALEDOBJECTS = BY_KEY["scaledobjects.keda.sh"]

GROUPS: dict[str, list[str]] = {}
for _r in ALL:
    if _r.group:
        GROUPS.setdefault(_r.group, [])
        if _r.version not in GROUPS[_r.group]:
            GROUPS[_r.group].append(_r.version)
