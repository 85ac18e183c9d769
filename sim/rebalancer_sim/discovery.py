"""Discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>/<version>`).

Built from the resource table. kubectl asks for aggregated discovery first and falls back to
these legacy documents when the answer is plain `application/json`; it finds `pods/eviction`
here to decide between eviction and deletion in `kubectl drain`.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.resources import VERBS, ResourceType

KUBERNETES_VERSION = ("1", "32", "v1.32.0-sim")


def version() -> dict[str, Any]:
    major, minor, git = KUBERNETES_VERSION
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in R.GROUPS[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in R.GROUPS]}


def group(name: str) -> dict[str, Any] | None:
    if name not in R.GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def _subresource(resource: ResourceType, sub: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": f"{resource.plural}/{sub}",
        "singularName": "",
        "namespaced": resource.namespaced,
    }
    if sub == "eviction":
        entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
    elif sub == "scale":
        entry.update(
            group="autoscaling", version="v1", kind="Scale", verbs=["get", "patch", "update"]
        )
    else:
        entry.update(kind=resource.kind, verbs=["get", "patch", "update"])
    return entry


def resource_list(group_name: str, version_name: str) -> dict[str, Any] | None:
    served = [r for r in R.ALL if r.group == group_name and r.version == version_name]
    if not served:
        return None
    entries: list[dict[str, Any]] = []
    for resource in served:
        entry: dict[str, Any] = {
            "name": resource.plural,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": VERBS,
        }
        if resource.short_names:
            entry["shortNames"] = list(resource.short_names)
        if resource.categories:
            entry["categories"] = list(resource.categories)
        entries.append(entry)
        entries.extend(_subresource(resource, sub) for sub in resource.subresources)
    group_version = f"{group_name}/{version_name}" if group_name else version_name
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }


def _path_prefix(resource: ResourceType) -> str:
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    if resource.namespaced:
        return f"{base}/namespaces/{{namespace}}/{resource.plural}/{{name}}"
    return f"{base}/{resource.plural}/{{name}}"


def openapi_v3_root() -> dict[str, Any]:
    """The OpenAPI v3 index: one document per group-version.

    Only what kubectl reads to decide on server-side field validation (`fieldValidation` on
    each kind's PATCH) is served; there are no schemas, so `kubectl explain` finds nothing.
    """
    paths = {}
    for resource in R.ALL:
        key = f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash=sim"}
    return {"paths": paths}


def openapi_v3_document(group_version_path: str) -> dict[str, Any] | None:
    served = [
        r
        for r in R.ALL
        if (f"apis/{r.group}/{r.version}" if r.group else "api/v1") == group_version_path
    ]
    if not served:
        return None
    paths: dict[str, Any] = {}
    for resource in served:
        extension = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        parameters = [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in ("dryRun", "fieldManager", "fieldValidation", "force")
        ]
        operation = {
            "parameters": parameters,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": extension,
        }
        paths[_path_prefix(resource)] = {"patch": operation}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION[2]},
        "paths": paths,
        "components": {"schemas": {}},
    }
