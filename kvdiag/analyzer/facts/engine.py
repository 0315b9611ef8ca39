"""Engine identity facts."""

from __future__ import annotations

from kvdiag.analyzer.facts.base import Facts
from kvdiag.analyzer.model import Fact
from kvdiag.analyzer.store import StoreReader


def engine_facts(reader: StoreReader, facts: Facts) -> None:
    kinds = reader.sql("SELECT DISTINCT kind FROM inputs WHERE status = 'used'")["kind"].to_list()
    if any(k.startswith("vllm") for k in kinds) or reader.scalar(
        "SELECT count(*) FROM metric_samples WHERE name LIKE 'vllm:%'"
    ):
        facts["engine"] = Fact("vllm", None, None)
