"""What the plugin read, turned into the controller's own views and settings. Pure.

`Raw` holds the objects as the API served them; `build_view` makes one `View` of them: the
controller's `Snapshot` (Nodes, pods, workloads, the eviction history), the DaemonSets, where
spot-rebalancer is installed and with which settings (read from its controller Deployment's
environment, so the plugin judges as that controller does: the same managed workloads, the same
declared pools, the same risk priors), the price table, and the cluster autoscaler's node groups.

What it is not: a second controller. It sees no Azure data (the controller's eviction-rate and
placement-score feeds, the Retail Prices API); it says so wherever that matters.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from rebalancer import names
from rebalancer.azure.prices import BUNDLED, PriceTable, parse_price_file
from rebalancer.config import describe_error, setting_fields
from rebalancer.controller.checkup import (
    NodeGroup,
    Setup,
    helm_upgrade_command,
    node_groups_from_status,
    setup_of,
)
from rebalancer.controller.history import History, history_from_configmap
from rebalancer.controller.kaito import WorkspaceInfo
from rebalancer.controller.karpenter import NodePoolInfo
from rebalancer.controller.model import (
    DaemonSetInfo,
    NodeInfo,
    PodInfo,
    WorkloadInfo,
    replicaset_owner,
)
from rebalancer.controller.planner import Settings
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.timefmt import parse_iso

DEFAULT_NAMESPACE = "spot-rebalancer"  # the chart's README installs there
ENV_PREFIX = "REBALANCER_"
# Settings that name things inside the controller's pod, meaningless here.
IN_POD_SETTINGS = ("prices_file", "kubeconfig")

Obj = dict[str, Any]


@dataclass(frozen=True)
class Raw:
    """The objects read, as the API served them. None: not read (forbidden, absent), with the
    reason in `problems`."""

    nodes: Sequence[Obj]
    pods: Sequence[Obj]
    replicasets: Sequence[Obj]
    deployments: Sequence[Obj]
    statefulsets: Sequence[Obj]
    daemonsets: Sequence[Obj] | None
    history: Obj | None = None  # the ConfigMap `<lease>-history`
    lease: Obj | None = None
    prices: Obj | None = None  # the ConfigMap the controller's price file is mounted from
    autoscaler: Obj | None = None  # kube-system/cluster-autoscaler-status
    problems: Sequence[str] = ()
    nodepools: Sequence[Obj] | None = ()  # Karpenter's; () without Karpenter
    workspaces: Sequence[Obj] | None = ()  # KAITO's; () without KAITO


@dataclass(frozen=True)
class Install:
    """Where spot-rebalancer runs, as its chart's labels show it."""

    namespace: str
    controller: Obj | None  # the controller Deployment
    agent: Obj | None  # the agent DaemonSet
    env: Mapping[str, str]  # the controller container's literal environment
    problems: tuple[str, ...] = ()

    @property
    def prices_configmap(self) -> tuple[str, str] | None:
        """(ConfigMap name, key) the controller's price file is mounted from, if it has one."""
        path = self.env.get(f"{ENV_PREFIX}PRICES_FILE")
        if not path or self.controller is None:
            return None
        spec = ((self.controller.get("spec") or {}).get("template") or {}).get("spec") or {}
        container = _controller_container(self.controller)
        for mount in container.get("volumeMounts") or []:
            directory = str(mount.get("mountPath", "")).rstrip("/") + "/"
            if not path.startswith(directory):
                continue
            for volume in spec.get("volumes") or []:
                config_map = volume.get("configMap") or {}
                if volume.get("name") == mount.get("name") and config_map.get("name"):
                    return str(config_map["name"]), path[len(directory) :]
        return None


@dataclass(frozen=True)
class Lease:
    holder: str
    renewed: datetime | None


@dataclass(frozen=True)
class View:
    snapshot: Snapshot
    daemonsets: tuple[DaemonSetInfo, ...] | None
    install: Install
    settings: ControllerSettings
    planner: Settings
    prices: PriceTable
    node_groups: tuple[NodeGroup, ...] | None
    lease: Lease | None
    problems: tuple[str, ...] = field(default=())
    nodepools: tuple[NodePoolInfo, ...] | None = ()
    workspaces: tuple[WorkspaceInfo, ...] | None = ()

    @property
    def now(self) -> datetime:
        return self.snapshot.now

    def setup(self) -> Setup:
        """The doctor's input, judged with the controller's settings."""
        return setup_of(
            self.snapshot,
            settings=self.planner,
            daemonsets=self.daemonsets,
            node_groups=self.node_groups,
            nodepools=self.nodepools,
            workspaces=self.workspaces,
            helm_upgrade=helm_upgrade_command(
                self.settings.helm_chart, self.settings.helm_chart_version
            ),
        )


def _is(obj: Obj, component: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(names.PART_OF_LABEL) == names.PART_OF and (
        labels.get(names.COMPONENT_LABEL) == component
    )


def _namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace", ""))


def _controller_container(deployment: Obj) -> Obj:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or [{}]
    return next((c for c in containers if c.get("name") == "controller"), containers[0])


def find_install(
    deployments: Sequence[Obj], daemonsets: Sequence[Obj] | None, namespace: str | None
) -> Install:
    """spot-rebalancer's controller and agent by the chart's labels: in `namespace` if given,
    else wherever the controller (or the agent) is found."""
    controllers = [d for d in deployments if _is(d, "controller")]
    agents = [d for d in daemonsets or () if _is(d, "agent")]
    problems: list[str] = []
    if namespace is None:
        found = sorted({_namespace(o) for o in controllers} or {_namespace(o) for o in agents})
        namespace = found[0] if found else DEFAULT_NAMESPACE
        if len(found) > 1:
            problems.append(
                f"spot-rebalancer is installed in several namespaces ({', '.join(found)}); "
                f"showing {namespace}: choose with -n"
            )
    controller = next((d for d in controllers if _namespace(d) == namespace), None)
    agent = next((d for d in agents if _namespace(d) == namespace), None)
    env: dict[str, str] = {}
    if controller is None:
        problems.append(
            f"no spot-rebalancer controller Deployment in namespace {namespace}: the controller's "
            "default settings are assumed"
        )
    else:
        for variable in _controller_container(controller).get("env") or []:
            if isinstance(variable.get("value"), str):
                env[str(variable.get("name"))] = variable["value"]
    return Install(namespace, controller, agent, env, tuple(problems))


class _DeployedSettings(ControllerSettings):
    """The controller's settings from the values given alone: the plugin runs in the user's
    shell, whose REBALANCER_* variables are not the controller's."""

    read_environment = False


def settings_from_env(env: Mapping[str, str]) -> tuple[ControllerSettings, list[str]]:
    """The controller's settings as its environment gives them (literal values only, as the chart
    writes them). A value the controller would refuse leaves the defaults, and says so."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, spec in setting_fields(ControllerSettings).items():
        text = env.get(f"{ENV_PREFIX}{name.upper()}")
        if text is None or name in IN_POD_SETTINGS:
            continue
        if typing.get_origin(spec.annotation) in (list, dict):
            try:
                values[name] = json.loads(text)
            except ValueError:
                problems.append(f"controller setting {name}: not JSON; the default is assumed")
                continue
        else:
            values[name] = text
    try:
        return _DeployedSettings.model_validate(values), problems
    except ValidationError as error:
        problems.append(f"{describe_error(error)}; the defaults are assumed")
        return _DeployedSettings.model_validate({}), problems


def price_table(
    install: Install, configmap: Obj | None, local_file: str | None
) -> tuple[PriceTable, list[str]]:
    """The bundled prices, under the controller's price file (its ConfigMap), under the user's
    `--prices` file (its text)."""
    table, problems = BUNDLED, []
    where = install.prices_configmap
    if where is not None and configmap is not None:
        text = (configmap.get("data") or {}).get(where[1])
        try:
            table = parse_price_file(str(text)).merged_over(table)
        except ValueError as error:
            problems.append(f"the controller's price file ({where[0]}) unreadable: {error}")
    elif where is not None:
        problems.append(f"the controller's price file ConfigMap {where[0]} could not be read")
    if local_file is not None:
        table = parse_price_file(local_file).merged_over(table)
    if install.env.get(f"{ENV_PREFIX}PRICES_API_ENABLED", "").lower() in ("true", "1", "yes"):
        problems.append(
            "the controller prices nodes from the Azure Retail Prices API, which this plugin does "
            "not read: its figures use the table above and may differ"
        )
    return table, problems


def lease_of(obj: Obj | None) -> Lease | None:
    if obj is None:
        return None
    spec = obj.get("spec") or {}
    return Lease(str(spec.get("holderIdentity") or ""), parse_iso(spec.get("renewTime")))


def build_view(
    raw: Raw, *, now: datetime, namespace: str | None, prices_file: str | None = None
) -> View:
    """One view of what was read. `prices_file`: the text of the user's `--prices` file."""
    install = find_install(raw.deployments, raw.daemonsets, namespace)
    settings, setting_problems = settings_from_env(install.env)
    prices, price_problems = price_table(install, raw.prices, prices_file)
    workloads = {
        w.key: w
        for w in (
            *(WorkloadInfo.from_json("Deployment", o) for o in raw.deployments),
            *(WorkloadInfo.from_json("StatefulSet", o) for o in raw.statefulsets),
        )
    }
    owners = {
        (_namespace(rs), str(rs["metadata"]["name"])): replicaset_owner(rs)
        for rs in raw.replicasets
    }
    history: History = history_from_configmap(raw.history) if raw.history else History()
    snapshot = Snapshot(
        now=now,
        nodes={n.name: n for n in map(NodeInfo.from_json, raw.nodes)},
        pods={p.key: p for p in map(PodInfo.from_json, raw.pods)},
        workloads=workloads,
        replicaset_owners={k: v for k, v in owners.items() if v},
        history=history,
    )
    autoscaler = (raw.autoscaler or {}).get("data") or {}
    groups = node_groups_from_status(autoscaler["status"]) if "status" in autoscaler else None
    problems = [*raw.problems, *install.problems, *setting_problems, *price_problems]
    if history.unreadable:
        problems.append(f"the eviction history is unreadable: {history.unreadable}")
    return View(
        snapshot=snapshot,
        daemonsets=None
        if raw.daemonsets is None
        else tuple(DaemonSetInfo.from_json(o) for o in raw.daemonsets),
        install=install,
        settings=settings,
        planner=settings.planner,
        prices=prices,
        node_groups=None if groups is None else tuple(groups),
        lease=lease_of(raw.lease),
        problems=tuple(problems),
        nodepools=None
        if raw.nodepools is None
        else tuple(NodePoolInfo.from_json(o) for o in raw.nodepools),
        workspaces=None
        if raw.workspaces is None
        else tuple(WorkspaceInfo.from_json(o) for o in raw.workspaces),
    )
