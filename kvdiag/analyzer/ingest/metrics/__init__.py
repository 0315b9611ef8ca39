"""Metrics: Prometheus text and OpenMetrics scrapes, API exports, Grafana CSV, aliases."""
