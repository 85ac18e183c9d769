"""RFC 3339 times as the project writes and reads them on cluster objects (UTC, `Z`)."""

from __future__ import annotations

from datetime import UTC, datetime

from rebalancer.strict import moment


def iso(moment: datetime, timespec: str = "seconds") -> str:
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_iso(text: object) -> datetime | None:
    """An aware UTC datetime, or None for anything empty, unreadable, without a zone or out of
    range (`strict.moment`): a reader that must say why uses `moment` itself."""
    try:
        return moment(text)
    except ValueError:
        return None
