"""Kubernetes' matching rules for taints, tolerations and node affinity, as tables.

tests/sim/test_scheduler_scoring.py checks the edges against the real kube-scheduler.
"""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer.controller.scheduling import preferred_weight, unmet_placement
from rebalancer.upstream.placement import (
    fits_node_selector_and_affinity,
    preferred_affinity_weight,
    tolerates,
    untolerated,
    untolerated_prefer_no_schedule,
)

SPOT = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": SPOT["key"], "operator": "Equal", "value": "spot"}, True),
        ({"key": SPOT["key"], "value": "spot"}, True),  # Equal by default
        ({"key": SPOT["key"], "value": "other"}, False),
        ({"key": SPOT["key"], "operator": "Exists"}, True),
        ({"key": SPOT["key"], "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # an empty key with Exists tolerates everything
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": SPOT["key"], "operator": "Gt", "value": "spot"}, False),  # unknown: never
    ],
)
def test_a_toleration_tolerates_a_taint_as_upstream(
    toleration: dict[str, Any], expected: bool
) -> None:
    assert tolerates(toleration, SPOT) is expected


def test_only_hard_taints_keep_a_pod_off_and_prefer_no_schedule_counts() -> None:
    soft = {"key": "cooling", "effect": "PreferNoSchedule"}
    assert untolerated([], [SPOT, soft]) == [SPOT]
    assert untolerated_prefer_no_schedule([], [SPOT, soft, soft]) == 2
    assert untolerated_prefer_no_schedule([{"operator": "Exists"}], [soft]) == 0


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


LABELS = {"pool": "spot1", "gpus": "4"}
EXISTS = {"key": "pool", "operator": "Exists"}


@pytest.mark.parametrize(
    ("spec", "name", "fits"),
    [
        ({}, "n1", True),
        ({"nodeSelector": {"pool": "spot1"}}, "n1", True),
        ({"nodeSelector": {"pool": "spot2"}}, "n1", False),
        (
            _required(
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["spot1"]}]}
            ),
            "n1",
            True,
        ),
        (
            _required(
                {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["spot1"]}]}
            ),
            "n1",
            False,
        ),
        (
            _required(
                {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["1"]}]}
            ),
            "n1",
            True,
        ),
        (
            _required({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
            "n1",
            True,
        ),
        (_required({"matchExpressions": [{"key": "pool", "operator": "Exists"}]}), "n1", True),
        # Terms are ORed, expressions in a term ANDed.
        (
            _required(
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
                {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["3"]}]},
            ),
            "n1",
            True,
        ),
        (
            _required({"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["4"]}]}),
            "n1",
            False,
        ),
        (
            _required({"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["+3"]}]}),
            "n1",
            True,
        ),
        (
            _required({"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["٣"]}]}),
            "n1",
            False,
        ),
        # A term with no requirement matches no node; matchFields read the node's name.
        (_required({}), "n1", False),
        (
            _required(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ),
            "n1",
            True,
        ),
        (
            _required(
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ),
            "n2",
            False,
        ),
    ],
)
def test_node_selector_and_required_affinity_as_upstream(
    spec: dict[str, Any], name: str, fits: bool
) -> None:
    assert fits_node_selector_and_affinity(spec, LABELS, name) is fits


def test_preferred_weights_add_up_for_the_terms_that_match() -> None:
    def term(weight: int, key: str, value: str) -> dict[str, Any]:
        expression = {"key": key, "operator": "In", "values": [value]}
        return {"weight": weight, "preference": {"matchExpressions": [expression]}}

    preferred = [term(60, "pool", "spot1"), term(30, "gpus", "4"), term(10, "pool", "other")]
    spec = {
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    }
    assert preferred_affinity_weight(spec, LABELS, "n1") == 90


def test_the_controllers_pool_check_reads_node_affinity_by_the_same_rules() -> None:
    """The controller judges a pool (no node name yet) by Kubernetes' rules: an empty required
    term fits no pool, as the real scheduler places such a pod nowhere."""
    assert unmet_placement(_required({}), LABELS) == [
        "required node affinity (a term without expressions)"
    ]
    assert unmet_placement(_required({}, {"matchExpressions": [EXISTS]}), LABELS) == []
    assert (
        preferred_weight(
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 7, "preference": {}}
                        ]
                    }
                }
            },
            LABELS,
        )
        == 0
    )
