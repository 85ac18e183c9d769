"""The planner's sub-planners, one module each, in the order `planner.plan` runs them.

Each takes the snapshot (and what the ones before it claimed) and returns a `Proposal`: its
actions and the objects it claims. Each plans one object at a time through `Containment`, so a
failure planning one object leaves only that object alone this pass.

- eviction_history: every new notice recorded once
- cordons: cordon a node under notice; restore it when the notice is gone
- surge: replace doomed replicas make-before-break, then scale back (a state machine)
- holds: our PodDisruptionBudget on a surged Deployment while its replacements load
- bounds: an HPA's bounds raised for a surge, put back after
- drain: evict or delete what else runs on a doomed node; mark it drained
- cooldowns: steer new pods away from the rest of an evicted spot pool
- deletion_costs: give pods their deletion cost back when no longer doomed
- policies: record each workload's valid placement policy
- spares: spare replicas, and availability targets (target_plan.py)
(returns.py, beside this package, moves replicas back to spot.)
"""
