"""The protobuf body decoder, on bodies built here by hand with field numbers taken from
upstream's generated.proto (k8s.io/api v0.34.4): what kubectl's own bodies do not exercise
(tests/sim/test_kubectl_create.py covers those)."""

from __future__ import annotations

import pytest

from rebalancer_sim.protobuf import MAGIC, ProtobufError, decode


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative numbers: two's complement on 10 bytes, as Go writes them
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def text(number: int, value: str) -> bytes:
    return field(number, value.encode())


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = text(1, api_version) + text(2, kind)
    return MAGIC + field(1, type_meta) + field(2, raw)


def quantity_entry(name: str, amount: str) -> bytes:
    return text(1, name) + field(2, text(1, amount))  # map entry: key 1, value 2 (Quantity)


def test_a_pod_with_pointers_zeros_maps_times_and_negative_numbers() -> None:
    metadata = (
        text(1, "p")
        + text(2, "")  # generateName: a Go value field, zero, on the wire; omitempty drops it
        + field(8, field(1, 1_764_547_200))  # creationTimestamp seconds: 2025-12-01T00:00:00Z
        + field(11, text(1, "app") + text(2, "llm"))  # labels entry
    )
    container = (
        text(1, "llm")
        + text(2, "vllm:1")
        + field(6, field(3, 8000))  # ports[0].containerPort; protocol unsent
        + field(
            8, field(2, quantity_entry("cpu", "500m")) + field(2, quantity_entry("memory", "1Gi"))
        )
    )
    spec = (
        field(2, container)
        + field(4, 0)  # terminationGracePeriodSeconds: *int64, zero kept
        + field(11, 0)  # hostNetwork: bool value, false dropped
        + field(14, field(2, -1) + field(4, 5) + field(4, -7))  # runAsUser, supplementalGroups
    )
    pod = decode(envelope("v1", "Pod", field(1, metadata) + field(2, spec)))
    assert pod == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "p",
            "creationTimestamp": "2025-12-01T00:00:00Z",
            "labels": {"app": "llm"},
        },
        "spec": {
            "containers": [
                {
                    "name": "llm",
                    "image": "vllm:1",
                    "ports": [{"containerPort": 8000}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsUser": -1, "supplementalGroups": [5, -7]},
        },
    }


def test_packed_repeated_numbers_and_an_int_or_string() -> None:
    packed = varint(5) + varint(-7)
    spec = field(14, field(4, packed))  # supplementalGroups, packed
    pod = decode(envelope("v1", "Pod", field(2, spec)))
    assert pod["spec"]["securityContext"] == {"supplementalGroups": [5, -7]}
    # policy/v1 PodDisruptionBudgetSpec: minAvailable = 1 (IntOrString: type 1, strVal 3).
    pdb = decode(
        envelope(
            "policy/v1", "PodDisruptionBudget", field(2, field(1, field(1, 1) + text(3, "50%")))
        )
    )
    assert pdb["spec"] == {"minAvailable": "50%"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"kind": "Pod"}', "the body does not start with the Kubernetes protobuf prefix"),
        (envelope("example.com/v1", "Widget", b""), "no protobuf schema for example.com/v1 Widget"),
        (envelope("v1", "Pod", field(1, text(1, "p"))[:-1]), "truncated field"),
        (MAGIC + b"\x0f", "unsupported wire type 7"),
    ],
)
def test_what_cannot_be_decoded_is_refused_with_a_reason(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=message):
        decode(body)
