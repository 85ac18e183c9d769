"""`rebalancer simulate`: replay spot capacity traces through the controller's planner on a
virtual clock, and report availability and cost per policy.

Pure computation: only `rebalancer.simulate.files` reads and writes files (traces, the YAML
scenario, reports); everything else is a function of its arguments.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: the message names the file (or flag) and the problem. The CLI exits 2."""
