"""The controller: notices in, a plan out (pure), then an executor that applies it.

Work in progress: the model, pool compatibility and the planner exist; the informers, leader
election, executor and the `rebalancer controller` process are not written yet.
"""
