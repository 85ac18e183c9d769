"""Emulators for tests, benchmarks and the demo: IMDS Scheduled Events and a Kubernetes cluster."""
