"""The Azure VM name that IMDS lists in an event's `Resources`, from a Node's providerID.

AKS (Uniform scale set): `azure:///subscriptions/S/resourceGroups/RG/providers/
Microsoft.Compute/virtualMachineScaleSets/aks-gpu-123-vmss/virtualMachines/3` names the VM
`aks-gpu-123-vmss_3` (not the node name `aks-gpu-123-vmss000003`). A standalone VM or a Flexible
scale set instance: `.../virtualMachines/<name>` is the name itself.
"""

from __future__ import annotations


def vm_name_from_provider_id(provider_id: str) -> str | None:
    if not provider_id.lower().startswith("azure://"):
        return None
    parts = [p for p in provider_id[len("azure://") :].split("/") if p]
    lowered = [p.lower() for p in parts]
    if "virtualmachinescalesets" in lowered:
        index = lowered.index("virtualmachinescalesets")
        if index + 3 < len(parts) and lowered[index + 2] == "virtualmachines":
            return f"{parts[index + 1]}_{parts[index + 3]}"
        return None
    if "virtualmachines" in lowered:
        index = lowered.index("virtualmachines")
        if index + 1 < len(parts):
            return parts[index + 1]
    return None
