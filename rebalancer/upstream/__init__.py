"""Kubernetes' own behaviour, written once: the rules upstream controllers follow, as plain
functions over simple values.

Both models of a cluster import these: the emulator (`rebalancer_sim`, the tests' cluster) and
`rebalancer simulate`'s virtual world. The product's controller does not decide with them; it
predicts with its own reading of the cluster. Since the emulator and the simulator share the
rule, a mistake here would agree with itself in both: what keeps it honest is the conformance
cases in `tests/sim`, which run one scenario on the emulator and on the real control plane.
Each function names the upstream code it follows.

Pure: no I/O, no clock (a caller passes `now`), nothing of ours but other pure values.
"""
