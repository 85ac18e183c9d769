"""Every name the project writes on cluster objects, under one DNS prefix.

Outside tools and the two processes parse these; README "Interfaces" documents them.
Nothing here does I/O.
"""

from typing import Final

PREFIX: Final = "spot-rebalancer.io"

# Written by the agent on its own Node.
CONDITION_TYPE: Final = f"{PREFIX}/ScheduledEvent"
EVENTS_ANNOTATION: Final = f"{PREFIX}/scheduled-events"

# Written by the controller on a Node once it has been drained for an event: a comma-separated
# list of EventIds. The agent acknowledges an event to Azure only when its id is listed here.
DRAINED_FOR_ANNOTATION: Final = f"{PREFIX}/drained-for"

# Names owned by other components that we read and must never write.
AKS_SPOT_LABEL: Final = "kubernetes.azure.com/scalesetpriority"
AKS_AGENTPOOL_LABEL: Final = "kubernetes.azure.com/agentpool"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"

# An operator sets this on a Node to have it drained now, as if a notice had arrived. Its value
# is "now", or an RFC 3339 deadline; anything else also means now.
DRAIN_REQUEST_ANNOTATION: Final = f"{PREFIX}/drain"

# AKS's node-problem-detector conditions for Scheduled Events (shared reference E).
NPD_PREEMPTION_CONDITION: Final = "PreemptionScheduled"
NPD_ANY_EVENT_CONDITION: Final = "VMEventScheduled"
NPD_PER_TYPE_CONDITIONS: Final = {
    "FreezeScheduled": "Freeze",
    "RebootScheduled": "Reboot",
    "RedeployScheduled": "Redeploy",
    "TerminateScheduled": "Terminate",
    "PreemptScheduled": "Preempt",
}
