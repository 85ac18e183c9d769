"""What the plugin writes to a terminal, made inert: control characters shown, not obeyed. Pure.

Annotations, records, the Lease holder, error messages: much of what the plugin prints was
written by someone else, and a terminal obeys what it is sent (ESC and CSI sequences retitle the
window, clear the screen, move the cursor; a carriage return or a newline forges a line). Every
text rendering goes through `printable_document` once, before any of it is laid out, so column
widths count what is shown. C0 (newline and tab included), DEL and C1 become visible escapes
(`\\x1b`). The `-o json` output needs none of this: `json.dumps` with `ensure_ascii` escapes every
one of them (`\\u001b`, `\\u007f`, `\\u009b`) and a JSON reader gets the value back unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str) -> str:
    """`text` with every C0 and C1 control character and DEL written as `\\xNN`."""
    return CONTROL.sub(_escape, text)


def printable_lines(text: str) -> str:
    """Multi-line text of our own making (YAML from `yaml.safe_dump`): its line breaks kept,
    every other control character escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable_document(value: Any, *, multiline: Collection[str] = ()) -> Any:
    """A JSON document with every string in it (keys too) `printable`; the strings under the keys
    in `multiline` keep their line breaks (`printable_lines`)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {
            printable(str(key)): printable_lines(item)
            if key in multiline and isinstance(item, str)
            else printable_document(item, multiline=multiline)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [printable_document(item, multiline=multiline) for item in value]
    return value
