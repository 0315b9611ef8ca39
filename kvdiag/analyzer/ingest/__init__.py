"""Ingesters: one per input kind, listed explicitly in the order they are consulted."""

from __future__ import annotations

from kvdiag.analyzer.ingest.base import Ingester
from kvdiag.analyzer.ingest.client_requests import ClientRequestsIngester
from kvdiag.analyzer.ingest.grafana_csv import GrafanaCsvIngester
from kvdiag.analyzer.ingest.launch_flags import LaunchFlagsIngester
from kvdiag.analyzer.ingest.model_config import ModelConfigIngester
from kvdiag.analyzer.ingest.nvidia_smi import NvidiaSmiIngester
from kvdiag.analyzer.ingest.prom_api import PromApiIngester
from kvdiag.analyzer.ingest.prom_text import PromTextIngester
from kvdiag.analyzer.ingest.scrape_log import ScrapeLogIngester
from kvdiag.analyzer.ingest.sglang_log import SglangLogIngester
from kvdiag.analyzer.ingest.vllm_log import VllmLogIngester

INGESTERS: tuple[type[Ingester], ...] = (
    VllmLogIngester,
    SglangLogIngester,
    PromTextIngester,
    NvidiaSmiIngester,
    ModelConfigIngester,
    LaunchFlagsIngester,
    ClientRequestsIngester,
    ScrapeLogIngester,
    PromApiIngester,
    GrafanaCsvIngester,
)

INGESTERS_BY_KIND: dict[str, type[Ingester]] = {i.kind: i for i in INGESTERS}
