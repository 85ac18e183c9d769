"""JSON merge patch (RFC 7386), as the API server applies the controller's merge patches.

The simulator keeps its objects as Python values, not API objects; the adapter turns a Node,
Deployment or Pod into the JSON the API would show, applies the very patch the executor sends
with this function, and reads the result back. No I/O, no controller code.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(document: Any, patch: Any) -> Any:
    """`document` patched by `patch`: an object merges member by member, `null` removes a
    member, anything else (lists included: a taint list is replaced whole) replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(document) if isinstance(document, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
