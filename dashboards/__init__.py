"""Grafana dashboards as code; `python -m dashboards.build` writes the JSON beside it."""
