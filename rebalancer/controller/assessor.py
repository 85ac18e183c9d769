"""The risk of every spot group, assessed where the snapshot is built: the planner decides on
what this gives, and the Recorder only reports what the snapshot carries (it imports nothing
from here: a contract in pyproject.toml).

Stateful in two small ways, both about the assessment itself: it reassesses at most every
`interval_seconds` (Azure's data and the history change slowly, the nodes' count every pass),
and it keeps each group's last level for the hysteresis of `risk.level_of`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from rebalancer.azure.risk_data import RiskData, no_risk_data
from rebalancer.controller.history import History
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.risk import GroupKey, Risk, RiskSettings, assess


class RiskAssessor:
    def __init__(
        self,
        settings: RiskSettings | None = None,
        data: RiskData = no_risk_data,
        *,
        interval_seconds: float = 10.0,
    ) -> None:
        self._settings = settings or RiskSettings()
        self._data = data
        self._interval = interval_seconds
        self._at: float | None = None
        self._risks: dict[GroupKey, Risk] = {}

    def risks(
        self, nodes: Iterable[NodeInfo], history: History, *, now: datetime, monotonic: float
    ) -> dict[GroupKey, Risk]:
        """The groups' risks: assessed anew when `interval_seconds` have passed since the last
        time (`monotonic`), else the last assessment."""
        if self._at is not None and monotonic - self._at < self._interval:
            return self._risks
        self._at = monotonic
        rates, scores = self._data()
        self._risks = assess(
            nodes=nodes,
            history=history,
            now=now,
            settings=self._settings,
            eviction_rates=rates,
            placement_scores=scores,
            previous={key: risk.level for key, risk in self._risks.items()},
        )
        return self._risks
