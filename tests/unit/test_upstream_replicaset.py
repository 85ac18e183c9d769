"""Upstream's ReplicaSet victim order (`ActivePodsWithRanks`), rule by rule, as a table.

Expected values follow kubernetes 1.34's controller_utils.go; tests/sim/test_scale_down_order.py
checks the same rules against the real kube-controller-manager.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rebalancer.upstream.replicaset import (
    DELETION_COST,
    PodFacts,
    deletes_first,
    deletion_cost,
    deletion_order,
    victims,
)

NOW = 100_000.0
READY = PodFacts(uid="", node="n1", phase="Running", ready=True, ready_since=10.0, created=0.0)


def pod(uid: str, **fields: Any) -> PodFacts:
    return replace(READY, uid=uid, **fields)


@pytest.mark.parametrize(
    ("first", "second", "ranks", "why"),
    [
        (pod("a", node=""), pod("b", deletion_cost=-100), (1, 1), "unassigned before assigned"),
        (pod("a", phase="Pending", ready=False), pod("b", ready=False), (1, 1), "Pending first"),
        (pod("a", phase="Unknown"), pod("b"), (1, 1), "Unknown before Running"),
        (pod("a", ready=False, deletion_cost=9), pod("b", deletion_cost=-9), (1, 1), "not Ready"),
        (pod("a", deletion_cost=-5), pod("b", deletion_cost=7), (1, 1), "lower cost"),
        (pod("a", node="n2"), pod("b", deletion_cost=1), (3, 1), "cost before colocation"),
        (pod("a", node="n2"), pod("b"), (3, 1), "more pods of the owner on its node"),
        # Ready 1 s vs 60 s ago: buckets 29 and 35.
        (pod("a", ready_since=NOW - 1), pod("b", ready_since=NOW - 60), (1, 1), "later Ready"),
        (pod("a", restarts=2), pod("b", restarts=1), (1, 1), "more restarts"),
        (pod("a", sidecar_restarts=1), pod("b"), (1, 1), "more sidecar restarts"),
        (pod("a", created=NOW - 1), pod("b", created=NOW - 60), (1, 1), "later created"),
        (pod("b", created=None), pod("a", created=5.0), (1, 1), "unset time is latest"),
        # Same log2 bucket (2**35 ns is 34.4 s, 2**36 is 68.7 s): the lower UID first, although
        # `b` was Ready (or created) later and restarted more.
        (pod("a", ready_since=NOW - 60), pod("b", ready_since=NOW - 40, restarts=3), (1, 1), "uid"),
        (pod("a", created=NOW - 60), pod("b", created=NOW - 40), (1, 1), "uid, created"),
    ],
)
def test_each_rule_decides_in_upstreams_order(
    first: PodFacts, second: PodFacts, ranks: tuple[int, int], why: str
) -> None:
    assert deletes_first(first, second, rank_a=ranks[0], rank_b=ranks[1], now=NOW), why
    assert not deletes_first(second, first, rank_a=ranks[1], rank_b=ranks[0], now=NOW), why


def test_without_now_times_compare_exactly() -> None:
    later = pod("b", ready_since=NOW - 40)
    earlier = pod("a", ready_since=NOW - 60)
    assert deletes_first(later, earlier, rank_a=1, rank_b=1, now=None)
    assert not deletes_first(later, earlier, rank_a=1, rank_b=1, now=NOW)  # same bucket: uid


@pytest.mark.parametrize(
    ("text", "cost"),
    [
        (None, 0),
        ("", 0),
        ("7", 7),
        ("-5", -5),
        ("0", 0),
        ("+10", 0),
        ("008", 0),
        ("1e3", 0),
        ("١٢", 0),  # Arabic-Indic digits: int() would take them, Go's ParseInt does not
        (str(2**31 - 1), 2**31 - 1),
        (str(2**31), 0),
        (str(-(2**31)), -(2**31)),
    ],
)
def test_deletion_cost_parses_as_upstream(text: str | None, cost: int) -> None:
    annotations = {} if text is None else {DELETION_COST: text}
    assert deletion_cost(annotations) == cost


def test_ranks_count_the_owners_pods_on_each_node_and_victims_take_the_first() -> None:
    pods = [pod("a", node="n1"), pod("b", node="n2"), pod("c", node="n2"), pod("d", node="")]
    related = ["n1", "n2", "n2", "", "n3"]
    order = deletion_order(pods, facts=lambda p: p, related_nodes=related, now=NOW)
    assert [p.uid for p in order] == ["d", "b", "c", "a"]
    assert victims(pods, 2, facts=lambda p: p, related_nodes=related, now=NOW) == order[:2]
    assert victims(pods, 9, facts=lambda p: p, related_nodes=related, now=NOW) == pods
    assert victims(pods, 0, facts=lambda p: p, related_nodes=related, now=NOW) == []
