"""Azure's NVIDIA GPU VM sizes: how many GPUs each has, and the labels karpenter-provider-azure
gives a node of each size, so that a Karpenter NodePool that names sizes (by instance type, or by
`karpenter.azure.com/sku-*` family, series, name, version, GPU name) says how many GPUs its nodes
will have before any of them exists. Pure data and parsing, no I/O.

The GPU counts are Azure's (the size pages of learn.microsoft.com, the Resource SKUs API's `GPUs`
capability, which karpenter-provider-azure reads as the node's `nvidia.com/gpu` and
`karpenter.azure.com/sku-gpu-count`). Only whole-GPU NVIDIA sizes: a fractional size (NVadsA10 v5
below 36 vCPUs, NCadsA10 v4) shows a vGPU whose count Azure does not state the same way, and an AMD
size's GPUs are `amd.com/gpu`, not what a replica asks for here. A size that is not in the table
is unknown: whoever reads it must not guess.

The size labels follow karpenter-provider-azure (`pkg/providers/instancetype/instancetype.go`
`computeRequirements`, Aug 2026), which parses a size's name with skewer's `GetVMSize`
(github.com/Azure/skewer `vmsize.go`): family, series, version and GPU name come from the name.
A size whose name skewer cannot parse (the `_flex`, `f`-suffixed and GB200/GB300 sizes) is
skipped by Karpenter, never launched, and so left out here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

SKU_NAME = "karpenter.azure.com/sku-name"
SKU_FAMILY = "karpenter.azure.com/sku-family"
SKU_SERIES = "karpenter.azure.com/sku-series"
SKU_VERSION = "karpenter.azure.com/sku-version"
SKU_CPU = "karpenter.azure.com/sku-cpu"
AKS_SKU_CPU = "kubernetes.azure.com/sku-cpu"
SKU_GPU_COUNT = "karpenter.azure.com/sku-gpu-count"
SKU_GPU_NAME = "karpenter.azure.com/sku-gpu-name"
SKU_GPU_MANUFACTURER = "karpenter.azure.com/sku-gpu-manufacturer"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"

# skewer's `skuSizeScheme`, as is: [family][subfamily][vCPUs][-constrained][additive features]
# [_accelerator][_cc_][_n_][_MI300X_][_H100_][version][_Promo].
_SIZE_SCHEME = re.compile(
    r"^([A-Z])([A-Z]?)([A-Z]?)([0-9]+)-?((?:[0-9]+)?)((?:[abcdeilmtspPr]+|C+|NP)?)_?"
    r"(?:([A-Z][0-9]+)_?)?(_cc_)?(_[0-9]+_)?(_MI300X_)?(_H100_)?((?:[vV][1-9])?)?(_Promo)?$"
)

# NVIDIA GPUs per VM of each whole-GPU size.
GPUS: Mapping[str, int] = MappingProxyType(
    {
        # NC (K80), NCv2 (P100), NCv3 (V100): 1, 2 or 4 GPUs by size
        "Standard_NC6": 1, "Standard_NC12": 2, "Standard_NC24": 4, "Standard_NC24r": 4,
        "Standard_NC6_Promo": 1, "Standard_NC12_Promo": 2, "Standard_NC24_Promo": 4,
        "Standard_NC24r_Promo": 4,
        "Standard_NC6s_v2": 1, "Standard_NC12s_v2": 2, "Standard_NC24s_v2": 4,
        "Standard_NC24rs_v2": 4,
        "Standard_NC6s_v3": 1, "Standard_NC12s_v3": 2, "Standard_NC24s_v3": 4,
        "Standard_NC24rs_v3": 4,
        # NCasT4_v3 (T4)
        "Standard_NC4as_T4_v3": 1, "Standard_NC8as_T4_v3": 1, "Standard_NC16as_T4_v3": 1,
        "Standard_NC64as_T4_v3": 4,
        # NC A100 v4
        "Standard_NC24ads_A100_v4": 1, "Standard_NC48ads_A100_v4": 2,
        "Standard_NC96ads_A100_v4": 4,
        # NCads H100 v5 (H100 NVL)
        "Standard_NC40ads_H100_v5": 1, "Standard_NC80adis_H100_v5": 2,
        # ND (P40), NDv2 (V100), ND A100 v4, NDm A100 v4, ND H100 v5, ND H200 v5
        "Standard_ND6s": 1, "Standard_ND12s": 2, "Standard_ND24s": 4, "Standard_ND24rs": 4,
        "Standard_ND40rs_v2": 8,
        "Standard_ND96asr_v4": 8,
        "Standard_ND96amsr_A100_v4": 8, "Standard_ND96ams_A100_v4": 8,
        "Standard_ND96isr_H100_v5": 8, "Standard_ND96is_H100_v5": 8,
        "Standard_ND96isr_H200_v5": 8, "Standard_ND96is_H200_v5": 8,
        # NV (M60), NVv3 (M60), NVadsA10 v5 (whole A10s only)
        "Standard_NV6": 1, "Standard_NV12": 2, "Standard_NV24": 4,
        "Standard_NV6_Promo": 1, "Standard_NV12_Promo": 2, "Standard_NV24_Promo": 4,
        "Standard_NV12s_v3": 1, "Standard_NV24s_v3": 2, "Standard_NV48s_v3": 4,
        "Standard_NV36ads_A10_v5": 1, "Standard_NV36adms_A10_v5": 1,
        "Standard_NV72ads_A10_v5": 2,
    }
)  # fmt: skip


@dataclass(frozen=True)
class GpuSize:
    name: str  # as Azure spells it: Standard_NC24ads_A100_v4
    gpus: int
    labels: Mapping[str, str]  # what karpenter-provider-azure puts on a node of this size


def size_labels(name: str, gpus: int) -> dict[str, str] | None:
    """The size labels karpenter-provider-azure gives a node of size `name`; None when skewer
    cannot parse the name (Karpenter skips such a size)."""
    match = _SIZE_SCHEME.match(name.removeprefix("Standard_"))
    if match is None:
        return None
    family, sub1, sub2, cpus, _, features, accelerator = match.groups()[:7]
    version = match.group(12) or ""
    series = family + (sub1 + sub2 if sub1 else "") + features + (f"_{version}" if version else "")
    labels = {
        INSTANCE_TYPE: name,
        SKU_NAME: name,
        SKU_FAMILY: family,
        SKU_SERIES: series,
        SKU_VERSION: version[1:] if version else "1",
        SKU_CPU: cpus,
        AKS_SKU_CPU: cpus,
        SKU_GPU_COUNT: str(gpus),
        SKU_GPU_MANUFACTURER: "nvidia",
        ARCH: "amd64",
    }
    if accelerator:
        labels[SKU_GPU_NAME] = accelerator
    return labels


def _sizes() -> tuple[GpuSize, ...]:
    sizes = []
    for name, gpus in GPUS.items():
        labels = size_labels(name, gpus)
        if labels is not None:
            sizes.append(GpuSize(name, gpus, MappingProxyType(labels)))
    return tuple(sizes)


SIZES: tuple[GpuSize, ...] = _sizes()
# The requirement keys whose values every size above has (or, for the GPU name, has or lacks)
# as karpenter-provider-azure would: a requirement on one of them can be judged size by size.
LABEL_KEYS = frozenset(
    {
        INSTANCE_TYPE, SKU_NAME, SKU_FAMILY, SKU_SERIES, SKU_VERSION, SKU_CPU, AKS_SKU_CPU,
        SKU_GPU_COUNT, SKU_GPU_NAME, SKU_GPU_MANUFACTURER, ARCH,
    }
)  # fmt: skip


def gpus_of(name: str) -> int | None:
    """The GPUs of a size, None when it is not in the table (case as Azure spells it, or any)."""
    if name in GPUS:
        return GPUS[name]
    lowered = name.lower()
    return next((gpus for size, gpus in GPUS.items() if size.lower() == lowered), None)
