"""Emulators for tests, benchmarks and the demo: IMDS Scheduled Events and a Kubernetes cluster.

`cluster.ClusterEmulator` is the entry point for an emulated AKS cluster (see docs/emulator.md);
`imds.ImdsEmulator` serves Azure Scheduled Events for many VMs. Nothing here imports
kubernetes_asyncio: the emulator speaks HTTP and is tested with the real clients.

A developer package (distribution `spot-rebalancer-sim`, sim/ in the repository), installed into
.venv by scripts/bootstrap and never into the container image; `rebalancer` never imports it
statically (an import-linter contract), it only hands `demo` and `sim ...` to `rebalancer_sim.cli`.
"""
