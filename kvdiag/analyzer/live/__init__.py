"""Live sources: pull an incident's metrics from a server speaking the Prometheus HTTP API.

`fetch` writes what the rules need as saved API responses (one JSON file per query, the
query inside it) plus `manifest.json`; the ordinary pipeline then analyses that folder, so
an online analysis and a later offline one of the saved folder are the same analysis.
"""
