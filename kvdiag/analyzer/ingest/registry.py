"""The ingesters: one per input kind, listed explicitly in the order they are consulted."""

from __future__ import annotations

from kvdiag.analyzer.ingest.base import Ingester
from kvdiag.analyzer.ingest.client_requests import ClientRequestsIngester
from kvdiag.analyzer.ingest.config.launch_flags import LaunchFlagsIngester
from kvdiag.analyzer.ingest.config.model_config import ModelConfigIngester
from kvdiag.analyzer.ingest.gpu.nvidia_smi import NvidiaSmiIngester
from kvdiag.analyzer.ingest.logs.sglang import SglangLogIngester
from kvdiag.analyzer.ingest.logs.tgi import TgiLogIngester
from kvdiag.analyzer.ingest.logs.trtllm import TrtllmLogIngester
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester
from kvdiag.analyzer.ingest.metrics.api_export import PromApiIngester
from kvdiag.analyzer.ingest.metrics.exposition import PromTextIngester
from kvdiag.analyzer.ingest.metrics.grafana_csv import GrafanaCsvIngester
from kvdiag.analyzer.ingest.metrics.scrape_log import ScrapeLogIngester
from kvdiag.analyzer.ingest.metrics.trtllm_stats import TrtllmStatsIngester

INGESTERS: tuple[type[Ingester], ...] = (
    VllmLogIngester,
    SglangLogIngester,
    TgiLogIngester,
    TrtllmLogIngester,
    PromTextIngester,
    NvidiaSmiIngester,
    ModelConfigIngester,
    LaunchFlagsIngester,
    ClientRequestsIngester,
    ScrapeLogIngester,
    PromApiIngester,
    TrtllmStatsIngester,
    GrafanaCsvIngester,
)

INGESTERS_BY_KIND: dict[str, type[Ingester]] = {i.kind: i for i in INGESTERS}
