"""Kubernetes' own behaviour, written once: the rules upstream controllers follow, as plain
functions over simple values.

Both models of a cluster import these: the emulator (`rebalancer_sim`, the tests' cluster,
which the product's image does not ship) and `rebalancer simulate`'s virtual world; the
controller's pool check (`rebalancer.controller.scheduling`) matches taints and node affinity
with `placement` too. Since they share each rule, a mistake here would agree with itself
everywhere: what keeps it honest is the conformance cases in `tests/sim`, which run one scenario
on the emulator and on the real control plane. Each function names the upstream code it follows.

Pure: no I/O, no clock (a caller passes `now`), nothing of ours but other pure values.
"""
