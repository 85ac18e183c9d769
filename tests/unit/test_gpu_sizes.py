"""Azure's GPU sizes as karpenter-provider-azure labels their nodes: the table's sizes are ones
Karpenter launches (skewer parses their names), and their labels are the ones its own tests and
examples show."""

from __future__ import annotations

import pytest

from rebalancer.azure import gpu_sizes


def test_every_size_in_the_table_is_one_karpenter_launches() -> None:
    """Karpenter skips a size whose name skewer cannot parse; such a size in the table would
    count GPUs no NodePool can launch."""
    assert len(gpu_sizes.SIZES) == len(gpu_sizes.GPUS)
    assert gpu_sizes.size_labels("Standard_ND96isf_H100_v5", 8) is None  # not parsed: skipped


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "Standard_NC24ads_A100_v4",
            {"family": "N", "series": "NCads_v4", "version": "4", "cpu": "24", "gpu": "A100"},
        ),
        (
            "Standard_NC80adis_H100_v5",
            {"family": "N", "series": "NCadis_v5", "version": "5", "cpu": "80", "gpu": "H100"},
        ),
        ("Standard_NC6s_v3", {"family": "N", "series": "NCs_v3", "version": "3", "cpu": "6"}),
        ("Standard_NC24r", {"family": "N", "series": "NCr", "version": "1", "cpu": "24"}),
        ("Standard_ND96asr_v4", {"family": "N", "series": "NDasr_v4", "version": "4", "cpu": "96"}),
    ],
)
def test_a_sizes_labels_are_karpenter_provider_azures(name: str, expected: dict[str, str]) -> None:
    labels = gpu_sizes.size_labels(name, gpus=1)
    assert labels is not None
    seen = {
        "family": labels[gpu_sizes.SKU_FAMILY],
        "series": labels[gpu_sizes.SKU_SERIES],
        "version": labels[gpu_sizes.SKU_VERSION],
        "cpu": labels[gpu_sizes.SKU_CPU],
    }
    if gpu_sizes.SKU_GPU_NAME in labels:
        seen["gpu"] = labels[gpu_sizes.SKU_GPU_NAME]
    assert seen == expected
    assert labels[gpu_sizes.SKU_NAME] == labels[gpu_sizes.INSTANCE_TYPE] == name


def test_gpus_of_a_size_whatever_its_case_and_none_when_unknown() -> None:
    assert gpu_sizes.gpus_of("Standard_NC96ads_A100_v4") == 4
    assert gpu_sizes.gpus_of("standard_nd96amsr_a100_v4") == 8
    assert gpu_sizes.gpus_of("Standard_NC8ads_A10_v4") is None  # a third of an A10
