"""Strict grammars for values that others write: tenants on their workloads, agents on their
Nodes, operators on HPAs. Parsed here, once, before any decision reads them.

Python's own readers are generous in ways an attacker can use: `'²'.isdigit()` is true and
`int('²')` raises; `int()` of 5000 digits raises; `datetime.fromisoformat` reads year 1 with a
+01:00 offset, which overflows when made UTC. Every reader here takes ASCII only, bounds lengths
and ranges, and fails with a ValueError that names the problem in a few words (never the whole
value: a refused value can be 256 KiB).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

MAX_DIGITS: Final = 9
# Times we act on: anything outside is not a time we or Kubernetes wrote. The bounds leave room
# for arithmetic (a deadline plus a cool-down) that must never overflow.
EARLIEST: Final = datetime(1970, 1, 1, tzinfo=UTC)
LATEST: Final = datetime(2999, 12, 31, tzinfo=UTC)
MAX_TIME_LENGTH: Final = 40


def shown(value: object, limit: int = 40) -> str:
    """A value as a problem names it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def whole_number(text: object, *, high: int, low: int = 0) -> int:
    """ASCII digits only (surrounding blanks allowed), at most MAX_DIGITS, within [low, high]."""
    if not isinstance(text, str):
        raise ValueError(f"{shown(text)} is not text")
    digits = text.strip()
    if not (0 < len(digits) <= MAX_DIGITS and digits.isascii() and digits.isdigit()):
        raise ValueError(f"{shown(text)} is not a whole number from {low} to {high}")
    value = int(digits)
    if not low <= value <= high:
        raise ValueError(f"{shown(text)} is not a whole number from {low} to {high}")
    return value


def moment(text: object) -> datetime:
    """An RFC 3339 time with a zone, as an aware UTC datetime between EARLIEST and LATEST."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("not a time")
    stripped = text.strip()
    if len(stripped) > MAX_TIME_LENGTH or not stripped.isascii():
        raise ValueError(f"{shown(text)} is not an RFC 3339 time")
    try:
        parsed = datetime.fromisoformat(stripped.replace("Z", "+00:00").replace("z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("no zone")
        parsed = parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValueError(f"{shown(text)} is not an RFC 3339 time with a zone") from None
    if not EARLIEST <= parsed <= LATEST:
        raise ValueError(f"{shown(text)} is outside {EARLIEST.year} to {LATEST.year}")
    return parsed
