"""The PATCH bodies the API server accepts: JSON patch, JSON merge patch, strategic merge patch.

Strategic merge needs to know, per list field, whether it is merged by a key or replaced; the
built-in types carry that in Go struct tags (`patchStrategy`, `patchMergeKey`). `MERGE_KEYS`
lists those tags for the fields of the kinds we serve. Lists not named there (node
`spec.taints`, pod `spec.tolerations`, container `args`) have no strategy upstream and are
replaced whole. Functions return new objects and never change their inputs.
"""

from __future__ import annotations

import copy
from typing import Any

from rebalancer_sim.status import ApiError, bad_request, unsupported_media_type

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# field name -> merge key, from the upstream Go types (k8s.io/api core/v1, apps/v1, meta/v1).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "addresses": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
# Lists of scalars with patchStrategy "merge": merged as sets.
MERGED_SCALAR_LISTS = frozenset({"finalizers"})


class _Unprocessable(ApiError):
    """A JSON patch that does not apply: 422 as upstream (v1.34) answers it, without saying
    which operation failed (`detail` is for the emulator's own debugging)."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
            details={},
        )
        self.detail = detail


# ---- JSON patch (RFC 6902) ------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _Unprocessable(
            f"the server rejected our request due to an error in our request: "
            f"invalid JSON pointer {path!r}"
        )
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict):
            if part not in node:
                raise _Unprocessable(f"doc is missing path: {path!r}: missing value")
            node = node[part]
        elif isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise _Unprocessable(f"doc is missing path: {path!r}: missing value") from None
        else:
            raise _Unprocessable(f"doc is missing path: {path!r}: missing value")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    try:
        return parent[last] if isinstance(parent, dict) else parent[int(last)]
    except (KeyError, ValueError, IndexError, TypeError):
        raise _Unprocessable(f"doc is missing path: {path!r}: missing value") from None


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    last = parts[-1]
    try:
        return parent.pop(last) if isinstance(parent, dict) else parent.pop(int(last))
    except (KeyError, ValueError, IndexError, TypeError):
        raise _Unprocessable(f"doc is missing path: {path!r}: missing value") from None


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise _Unprocessable(
                f"replace operation does not apply: doc is missing key: {path}: missing value"
            )
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
            return doc
        try:
            index = int(last)
        except ValueError:
            raise _Unprocessable(f"invalid index {last!r} in {path!r}") from None
        if replace:
            if not 0 <= index < len(parent):
                raise _Unprocessable(
                    f"replace operation does not apply: doc is missing key: {path}: missing value"
                )
            parent[index] = value
        else:
            if not 0 <= index <= len(parent):
                raise _Unprocessable(f"add operation does not apply: index {index} out of bounds")
            parent.insert(index, value)
    else:
        raise _Unprocessable(f"doc is missing path: {path!r}: missing value")
    return doc


def json_patch(doc: dict[str, Any], operations: Any) -> dict[str, Any]:
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    result: Any = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request("the server rejected our request due to an error in our request")
        op, path = operation["op"], operation["path"]
        if op == "add":
            result = _add(result, path, copy.deepcopy(operation.get("value")), replace=False)
        elif op == "replace":
            result = _add(result, path, copy.deepcopy(operation.get("value")), replace=True)
        elif op == "remove":
            _remove(result, path)
        elif op == "move":
            value = _remove(result, operation["from"])
            result = _add(result, path, value, replace=False)
        elif op == "copy":
            value = copy.deepcopy(_get(result, operation["from"]))
            result = _add(result, path, value, replace=False)
        elif op == "test":
            if _get(result, path) != operation.get("value"):
                raise _Unprocessable(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"Unexpected kind: {op}")
    if not isinstance(result, dict):
        raise bad_request("the patched document is not an object")
    return result


# ---- JSON merge patch (RFC 7386) ------------------------------------------------------------


def merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---- Strategic merge patch ------------------------------------------------------------------


def strategic_merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise bad_request(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        )
    return _smp_map(doc if isinstance(doc, dict) else {}, patch)


def _smp_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return {}
    result = dict(original)
    # `$deleteFromPrimitiveList/<field>` comes first in effect.
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [item for item in result[field] if item not in value]
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            field = key.split("/", 1)[1]
            if field not in patch and isinstance(result.get(field), list):
                result[field] = _smp_list(field, result[field], [], order=value)
        if key.startswith("$"):
            continue  # $retainKeys: a pruning hint only
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            result[key] = _smp_map(current if isinstance(current, dict) else {}, value)
            if value.get("$patch") == "delete":
                result.pop(key, None)
        elif isinstance(value, list):
            order = patch.get(f"$setElementOrder/{key}")
            result[key] = _smp_list(key, result.get(key), value, order=order)
        else:
            result[key] = value
    return result


def _smp_list(
    field: str, original: Any, patch: list[Any], *, order: list[Any] | None = None
) -> list[Any]:
    current = list(original) if isinstance(original, list) else []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if field in MERGED_SCALAR_LISTS:
        merged = list(current)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return _in_upstream_order(merged, current, patch if order is None else order, None)
    merge_key = MERGE_KEYS.get(field)
    if merge_key is None:
        return [copy.deepcopy(i) for i in patch]
    result = list(current)
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"unable to find api field in struct for the list {field}")
        if merge_key not in item:
            # Upstream answers this with a bare 500 and Go's rendering of the item.
            raise ApiError(
                500, "", f"map: {_go_format(item)} does not contain declared merge key: {merge_key}"
            )
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(_smp_map({}, item))
        else:
            result[index] = _smp_map(result[index], item)
    wanted = [i for i in patch if "$patch" not in i] if order is None else order
    return _in_upstream_order(result, current, wanted, merge_key)


def _in_upstream_order(
    merged: list[Any], server: list[Any], wanted: list[Any], merge_key: str | None
) -> list[Any]:
    """Order a merged list as upstream's normalizeElementOrder does: the items the patch names
    (in the patch's order, or its `$setElementOrder`) interleaved with the items only the server
    had (in their order), a server-only item going first only if it came before the patch item
    in the server's list. So an item new to the list lands before the server-only ones."""

    def identity(item: Any) -> Any:
        return item.get(merge_key) if merge_key is not None and isinstance(item, dict) else item

    wanted_ids = [identity(i) for i in wanted]
    server_ids = [identity(i) for i in server]

    def position(ids: list[Any], item: Any) -> int:
        key = identity(item)
        return ids.index(key) if key in ids else -1

    named = [i for i in merged if identity(i) in wanted_ids]
    named.sort(key=lambda i: position(wanted_ids, i))
    server_only = [i for i in merged if identity(i) not in wanted_ids]
    server_only.sort(key=lambda i: position(server_ids, i))
    result: list[Any] = []
    while named and server_only:
        left, right = position(server_ids, server_only[0]), position(server_ids, named[0])
        if left >= 0 and right >= 0 and left < right:
            result.append(server_only.pop(0))
        else:
            result.append(named.pop(0))
    return result + named + server_only


def _go_format(value: Any) -> str:
    """A value as Go's fmt %v prints the JSON it decoded: maps with sorted keys."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_format(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_format(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def apply(doc: dict[str, Any], content_type: str, body: Any) -> dict[str, Any]:
    """Apply one PATCH body of the given media type to `doc`; returns the patched copy."""
    media = content_type.split(";", 1)[0].strip()
    if media == JSON_PATCH:
        return json_patch(doc, body)
    if media == MERGE_PATCH:
        if not isinstance(body, dict):
            raise bad_request(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        result = merge_patch(doc, body)
        assert isinstance(result, dict)
        return result
    if media in (STRATEGIC_MERGE_PATCH, APPLY_PATCH):
        result = strategic_merge_patch(doc, body)
        assert isinstance(result, dict)
        return result
    raise unsupported_media_type(media)
