"""Generate `rebalancer_sim/protobuf_schema.json` from the Go types of k8s.io/api.

kubectl (1.32 and later) sends the bodies of its generator commands (`kubectl create
namespace|deployment|configmap|...`) in Kubernetes' protobuf encoding. The emulator decodes them
into the JSON shape with this schema: for every struct of the API groups it serves, each field's
protobuf number and wire type, its JSON name, its Go type, whether it is a pointer and whether
its JSON tag has `omitempty` (a Go value field that is zero is on the wire but not in JSON).
Everything comes from the struct tags of the Go sources, which generated.proto is made from.

Usage: python sim/tools/generate_protobuf_schema.py <Go module cache>/k8s.io  (the api@ and
apimachinery@ versions of the control plane under tests/cluster, v0.34.4 today).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

VERSION = "v0.34.4"
# package key -> (module, directory): the groups the emulator serves, and meta/v1.
PACKAGES = {
    "core/v1": ("api", "core/v1"),
    "apps/v1": ("api", "apps/v1"),
    "policy/v1": ("api", "policy/v1"),
    "coordination/v1": ("api", "coordination/v1"),
    "autoscaling/v2": ("api", "autoscaling/v2"),
    "admissionregistration/v1": ("api", "admissionregistration/v1"),
    "events/v1": ("api", "events/v1"),
    "meta/v1": ("apimachinery", "pkg/apis/meta/v1"),
}
IMPORTS = {
    "k8s.io/api/core/v1": "core/v1",
    "k8s.io/api/apps/v1": "apps/v1",
    "k8s.io/api/policy/v1": "policy/v1",
    "k8s.io/api/autoscaling/v2": "autoscaling/v2",
    "k8s.io/apimachinery/pkg/apis/meta/v1": "meta/v1",
}
# Types with their own protobuf shape (apimachinery), decoded by hand in protobuf.py.
SPECIAL = {
    "meta/v1.Time": "Time",
    "meta/v1.MicroTime": "MicroTime",
    "meta/v1.Duration": "Duration",
    "resource.Quantity": "Quantity",
    "intstr.IntOrString": "IntOrString",
    "runtime.RawExtension": "RawExtension",
    "meta/v1.FieldsV1": "FieldsV1",
    "types.UID": "string",
    "time.Duration": "int64",
}
BUILTIN = {"string", "bool", "int32", "int64", "uint32", "uint64", "float64", "byte"}

STRUCT = re.compile(r"^type (\w+) struct \{$")
NAMED = re.compile(r"^type (\w+) (\S+)$")
FIELD = re.compile(r"^\t(?:(\w+)\s+)?(\S+)\s+`([^`]*)`")
TAG = re.compile(r'(\w+):"([^"]*)"')
IMPORT = re.compile(r'^\s*(?:(\w+)\s+)?"([^"]+)"$')


def parse_package(key: str, directory: Path) -> tuple[dict[str, list[dict]], dict[str, str]]:
    structs: dict[str, list[dict]] = {}
    named: dict[str, str] = {}
    for path in sorted(directory.glob("*.go")):
        skipped = path.name.endswith("_test.go") or path.name.startswith("zz_")
        if skipped or "generated" in path.name:
            continue
        aliases = {"metav1": "meta/v1", "v1": "meta/v1" if key == "meta/v1" else "core/v1"}
        current: str | None = None
        for line in path.read_text().splitlines():
            imported = IMPORT.match(line)
            if imported and imported.group(2) in IMPORTS:
                alias = imported.group(1) or imported.group(2).rsplit("/", 1)[1]
                aliases[alias] = IMPORTS[imported.group(2)]
            if current is None:
                if match := STRUCT.match(line):
                    current = match.group(1)
                    structs[current] = []
                elif match := NAMED.match(line):
                    named[match.group(1)] = qualify(match.group(2), key, aliases)
                continue
            if line == "}":
                current = None
                continue
            match = FIELD.match(line)
            if not match:
                continue
            tags = dict(TAG.findall(match.group(3)))
            if tags.get("protobuf", "-") == "-":
                continue
            wire, number, *options = tags["protobuf"].split(",")
            json_tag = tags.get("json", "").split(",")
            go_type = match.group(2)
            structs[current].append(
                {
                    "number": int(number),
                    "wire": wire,
                    "json": json_tag[0] or match.group(1) or go_type.rsplit(".", 1)[-1],
                    "omitempty": "omitempty" in json_tag[1:],
                    "type": qualify(go_type, key, aliases),
                    "repeated": "rep" in options,
                }
            )
    return structs, named


def qualify(go_type: str, key: str, aliases: dict[str, str]) -> str:
    """`*[]metav1.Time` -> `*[]meta/v1.Time`; unqualified names get this package's key."""
    prefix = re.match(r"^[*\[\]]*", go_type).group(0)  # type: ignore[union-attr]
    rest = go_type[len(prefix) :]
    if rest.startswith("map["):
        key_type, value_type = rest[4:].split("]", 1)
        return f"{prefix}map[{qualify(key_type, key, aliases)}]{qualify(value_type, key, aliases)}"
    if rest in BUILTIN:
        return prefix + rest
    if "." in rest:
        package, name = rest.split(".", 1)
        qualified = f"{aliases.get(package, package)}.{name}"
    else:
        qualified = f"{key}.{rest}"
    return prefix + SPECIAL.get(qualified, qualified)


def main(root: Path) -> None:
    messages: dict[str, list[dict]] = {}
    named: dict[str, str] = {}
    for key, (module, directory) in PACKAGES.items():
        structs, names = parse_package(key, root / f"{module}@{VERSION}" / directory)
        messages.update({f"{key}.{name}": fields for name, fields in structs.items() if fields})
        named.update({f"{key}.{name}": target for name, target in names.items()})
    out = Path(__file__).resolve().parent.parent / "rebalancer_sim" / "protobuf_schema.json"
    document = {
        "source": f"k8s.io/api and k8s.io/apimachinery {VERSION} (sim/tools/{Path(__file__).name})",
        "named": dict(sorted(named.items())),
        "messages": dict(sorted(messages.items())),
    }
    out.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    print(f"{out}: {len(messages)} messages, {len(named)} named types")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
