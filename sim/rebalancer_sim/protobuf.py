"""Request bodies in Kubernetes' protobuf encoding, decoded into the JSON shape the store keeps.

kubectl 1.32 and later send the bodies of their generator commands (`kubectl create namespace`,
`create deployment`, `create configmap`, ...) as `application/vnd.kubernetes.protobuf`, and
client-go does not retry in JSON after a 415 (kubernetes#86253): a server must read them.
The envelope (`k8s\\x00` + `runtime.Unknown`: TypeMeta, raw bytes) carries the object's
apiVersion and kind; the object's fields are read with `protobuf_schema.json`, made from the
struct tags of k8s.io/api (sim/tools/generate_protobuf_schema.py). Fields a Go value type
writes even when zero are dropped when their JSON tag says `omitempty`, so the result is what
the same object sent as JSON would be. Answers stay JSON (the client accepts both).

Only decoding: the emulator never answers in protobuf. A kind, or a special type, the schema
does not know is refused with the error naming it.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
# apiVersion's group -> the schema's package prefix (core is "", events.k8s.io is "events").
_PACKAGES = {
    "": "core",
    "apps": "apps",
    "policy": "policy",
    "coordination.k8s.io": "coordination",
    "autoscaling": "autoscaling",
    "admissionregistration.k8s.io": "admissionregistration",
    "events.k8s.io": "events",
    "meta.k8s.io": "meta",
}


class ProtobufError(ValueError):
    """A body that is not Kubernetes protobuf, or that names what the schema lacks."""


@cache
def _schema() -> dict[str, Any]:
    text = (resources.files("rebalancer_sim") / "protobuf_schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    schema["by_number"] = {
        name: {field["number"]: field for field in fields}
        for name, fields in schema["messages"].items()
    }
    return schema


def decode(body: bytes) -> dict[str, Any]:
    """An object sent as Kubernetes protobuf, as the equivalent JSON document."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix")
    envelope = _fields(body[len(MAGIC) :])
    type_meta = _fields(_one(envelope, 1) or b"")
    api_version = _text(_one(type_meta, 1) or b"")
    kind = _text(_one(type_meta, 2) or b"")
    group, _, version = api_version.rpartition("/")
    package = _PACKAGES.get(group)
    message = f"{package}/{version}.{kind}"
    if package is None or message not in _schema()["messages"]:
        raise ProtobufError(f"no protobuf schema for {api_version} {kind}")
    encoding = _text(_one(envelope, 3) or b"")
    if encoding:
        raise ProtobufError(f"unsupported contentEncoding {encoding!r}")
    obj = _message(message, _one(envelope, 2) or b"")
    return {"kind": kind, "apiVersion": api_version, **obj}


# ---- the wire format ---------------------------------------------------------------------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(number, wire type, value): an int for varint/fixed, bytes for length-delimited."""
    out = []
    at = 0
    value: Any
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
        elif wire == 2:
            length, at = _varint(data, at)
            value, at = data[at : at + length], at + length
        elif wire == 5:
            value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if at > len(data):
            raise ProtobufError("truncated field")
        out.append((number, wire, value))
    return out


def _one(fields: list[tuple[int, int, Any]], number: int) -> Any:
    values = [value for n, _, value in fields if n == number]
    return values[-1] if values else None  # the last one wins, as in protobuf


def _text(value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise ProtobufError("a string field is not UTF-8") from None


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# ---- the schema ----------------------------------------------------------------------------------


def _resolve(go_type: str) -> str:
    named: dict[str, str] = _schema()["named"]
    seen = 0
    while go_type in named and seen < 10:
        go_type, seen = named[go_type], seen + 1
    return go_type


def _message(name: str, data: bytes) -> dict[str, Any]:
    by_number = _schema()["by_number"][name]
    out: dict[str, Any] = {}
    for number, wire, raw in _fields(data):
        field = by_number.get(number)
        if field is None:
            continue  # a field newer than the schema: proto3 semantics, skipped
        go_type = field["type"]
        pointer = go_type.startswith("*")
        base = go_type.lstrip("*")
        if base.startswith("[]") and base != "[]byte":
            element = base[2:]
            if wire == 2 and _scalar(_resolve(element)) in ("varint", "fixed64", "fixed32"):
                values = [_value(element, w, v) for _, w, v in _packed(raw, element)]
            else:
                values = [_value(element, wire, raw)]
            out.setdefault(field["json"], []).extend(values)
            continue
        if _resolve(base).startswith("map["):
            key, value = _map_entry(_resolve(base), raw)
            out.setdefault(field["json"], {})[key] = value
            continue
        value = _value(base, wire, raw)
        if value is None or (not pointer and field["omitempty"] and _zero(base, value)):
            out.pop(field["json"], None)
            continue
        out[field["json"]] = value
    return out


def _scalar(go_type: str) -> str | None:
    if go_type in ("bool", "int32", "int64", "uint32", "uint64"):
        return "varint"
    if go_type == "float64":
        return "fixed64"
    return None


def _packed(data: bytes, element: str) -> list[tuple[int, int, int]]:
    """A packed repeated scalar: its values, as if sent one by one."""
    out = []
    at = 0
    while at < len(data):
        if _scalar(_resolve(element)) == "fixed64":
            out.append((0, 1, int.from_bytes(data[at : at + 8], "little")))
            at += 8
        else:
            value, at = _varint(data, at)
            out.append((0, 0, value))
    return out


def _zero(go_type: str, value: Any) -> bool:
    """What Go's `omitempty` drops of a value (not pointer) field; structs are never dropped."""
    resolved = _resolve(go_type)
    if resolved in _schema()["messages"] or resolved in _SPECIAL:
        return False
    return not value


def _map_entry(map_type: str, data: bytes) -> tuple[str, Any]:
    key_type, value_type = map_type[4:].split("]", 1)
    entry = _fields(data)
    key = _value(key_type, 2, _one(entry, 1) or b"")
    value_field = [(w, v) for n, w, v in entry if n == 2]
    if value_field:
        wire, raw = value_field[-1]
        value = _value(value_type, wire, raw)
    else:
        value = _value(value_type, 2, b"") if _scalar(_resolve(value_type)) is None else 0
    if value_type.startswith("[]") and value_type != "[]byte":
        raise ProtobufError(f"unsupported map value type {value_type}")
    return str(key), value


def _value(go_type: str, wire: int, raw: Any) -> Any:
    resolved = _resolve(go_type)
    if resolved == "string":
        return _text(raw)
    if resolved == "[]byte":
        return base64.b64encode(raw).decode()
    if resolved == "bool":
        return bool(raw)
    if resolved == "int32":
        return _signed(raw, 32)
    if resolved in ("int64", "uint64", "uint32"):
        return _signed(raw, 64) if resolved == "int64" else raw
    if resolved == "float64":
        return struct.unpack("<d", raw.to_bytes(8, "little"))[0]
    if resolved in _SPECIAL:
        return _SPECIAL[resolved](raw)
    if resolved in _schema()["messages"]:
        return _message(resolved, raw)
    raise ProtobufError(f"no protobuf schema for {resolved}")


def _time(raw: bytes, *, micro: bool = False) -> str | None:
    fields = _fields(raw)
    seconds = _signed(_one(fields, 1) or 0, 64)
    nanos = _signed(_one(fields, 2) or 0, 32)
    if not fields:
        return None  # Go's zero time: null in JSON
    moment = datetime.fromtimestamp(seconds, UTC)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(raw: bytes) -> str:
    nanoseconds = _signed(_one(_fields(raw), 1) or 0, 64)
    seconds, rest = divmod(nanoseconds, 1_000_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    fraction = f".{rest:09d}".rstrip("0").rstrip(".") if rest else ""
    if hours:
        return f"{hours}h{minutes}m{seconds}{fraction}s"
    if minutes:
        return f"{minutes}m{seconds}{fraction}s"
    return f"{seconds}{fraction}s"


def _int_or_string(raw: bytes) -> int | str:
    fields = _fields(raw)
    if (_one(fields, 1) or 0) == 1:
        return _text(_one(fields, 3) or b"")
    return _signed(_one(fields, 2) or 0, 32)


def _embedded_json(raw: bytes) -> Any:
    data = _one(_fields(raw), 1) or b""
    try:
        return json.loads(data) if data else None
    except ValueError:
        raise ProtobufError("an embedded object is not JSON") from None


_SPECIAL: dict[str, Any] = {
    "Time": _time,
    "MicroTime": lambda raw: _time(raw, micro=True),
    "Duration": _duration,
    "Quantity": lambda raw: _text(_one(_fields(raw), 1) or b""),
    "IntOrString": _int_or_string,
    "RawExtension": _embedded_json,
    "FieldsV1": _embedded_json,
}
