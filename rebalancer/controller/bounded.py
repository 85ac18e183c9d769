"""Memory that what others write cannot grow: the "said once" sets of a long-running process.

A tenant's annotation, an agent's event id, a pod's name and the text of a refused policy are all
chosen by someone else; a set that remembers "already said" for each distinct value grows with
every value they choose (180 refused policy texts of 198 KB each once kept 37 MiB). Two shapes
keep that flat:
- `SaidOnce`: at most `limit` entries, each a 16-byte digest of the value (identity is all that
  counts), the least recently seen forgotten first. Forgetting one means it may be said once more:
  a repeated log line or Event, never a wrong decision (nothing here feeds one).
- `digest`: for maps whose keys are live objects (pruned every pass) but whose values are text.
Not for state a decision reads: that lives on the cluster objects, bounded by their own limits.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable

DIGEST_BYTES = 16


def digest(value: object) -> bytes:
    """A fixed-size stand-in for `value` (its repr), for "have I seen this one" only."""
    return hashlib.blake2b(
        repr(value).encode("utf-8", "replace"), digest_size=DIGEST_BYTES
    ).digest()


class SaidOnce:
    """Values already said, at most `limit` of them, kept as digests (least recently seen go
    first)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def first_time(self, value: Hashable) -> bool:
        """True the first time `value` is offered (or once it has been forgotten); it is then
        remembered. A value seen again becomes the most recent."""
        key = digest(value)
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self.limit:
            self._seen.popitem(last=False)
        return True

    def __contains__(self, value: object) -> bool:
        return digest(value) in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        self._seen.clear()
