"""Seals on our records (seal.py): ours verify; forged, tampered, copied or unsealed ones do not,
and a workload carrying one is left alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from rebalancer import names
from rebalancer.controller.model import ScalerInfo, WorkloadInfo
from rebalancer.controller.record_key import key_of
from rebalancer.controller.records import Surge
from rebalancer.controller.seal import NOT_OURS, Sealer, workload_identity
from tests.unit.test_planner import SURGE, deployment

SEALER = Sealer(b"k" * 32)
OTHER = Sealer(b"o" * 32)


def sealed_workload(sealer: Sealer = SEALER, uid: str = "uid-1") -> WorkloadInfo:
    plain = replace(deployment(4, surge=SURGE), uid=uid)
    text = sealer.seal(workload_identity(plain), names.SURGE_ANNOTATION, SURGE.to_json())
    annotations = {**plain.annotations, names.SURGE_ANNOTATION: text}
    return replace(plain, annotations=annotations)


def test_our_record_verifies_and_reads_as_written() -> None:
    workload = sealed_workload()
    checked = SEALER.verify_workload(workload)
    assert checked.refused == () and checked.surge == SURGE
    assert Surge.from_json(workload.annotations[names.SURGE_ANNOTATION]) == SURGE


@pytest.mark.parametrize(
    "make",
    [
        lambda: replace(deployment(4, surge=SURGE), uid="uid-1"),  # unsealed (hand-written)
        lambda: sealed_workload(OTHER),  # another installation's key
        lambda: replace(sealed_workload(), uid="uid-2"),  # copied to a re-created object
        lambda: replace(sealed_workload(), name="other"),  # copied to another workload
    ],
    ids=["unsealed", "other-key", "other-uid", "other-name"],
)
def test_a_record_not_sealed_for_this_object_is_refused_and_not_read(
    make: Callable[[], WorkloadInfo],
) -> None:
    checked = SEALER.verify_workload(make())
    assert checked.surge is None and not checked.surge_unreadable
    assert any(NOT_OURS in problem for problem in checked.refused)


def test_a_tampered_record_is_refused() -> None:
    workload = sealed_workload()
    text = workload.annotations[names.SURGE_ANNOTATION].replace(
        '"baseReplicas":3', '"baseReplicas":1'
    )
    tampered = replace(workload, annotations={names.SURGE_ANNOTATION: text})
    assert SEALER.verify_workload(tampered).refused


def test_the_hpa_bounds_we_saved_are_put_back_only_when_ours() -> None:
    def hpa(original: str) -> ScalerInfo:
        return ScalerInfo(
            "ml", "llm", ("Deployment", "llm"), 4, 4, original, uid="u", saved=original
        )

    identity = "HorizontalPodAutoscaler/ml/llm/u"
    ours = SEALER.seal(identity, names.HPA_ORIGINAL_ANNOTATION, "3,3")
    assert SEALER.verify_scaler(hpa(ours)).saved == "3,3"
    forged = SEALER.verify_scaler(hpa("100,100"))
    assert forged.saved is None and NOT_OURS in forged.refused


@pytest.mark.parametrize(
    "data",
    [{}, {"key": "not base64!"}, {"key": "c2hvcnQ="}, {"key": 5}],
    ids=["missing", "not-base64", "short", "not-text"],
)
def test_an_unusable_key_secret_is_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        key_of({"data": data})
