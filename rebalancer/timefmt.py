"""RFC 3339 times as the project writes and reads them on cluster objects (UTC, `Z`)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime, timespec: str = "seconds") -> str:
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_iso(text: object) -> datetime | None:
    """An aware UTC datetime, or None for anything empty, unreadable or without a zone."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else None
