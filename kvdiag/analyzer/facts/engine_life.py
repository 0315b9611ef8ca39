"""What vLLM v1 says of where prompt KV came from and of the engine's sleep.

- `vllm:prompt_tokens_by_source` (0.17.1+) splits prompt tokens by where their KV came
  from: prefilled here, this engine's prefix cache, or a KV connector (LMCache, NIXL, an
  offload tier). A fact only when some tokens did not come from local compute: a server
  that computes every prompt says nothing new by it.
- `vllm:engine_sleep_state` (0.11.2+): an engine put to sleep (`--enable-sleep-mode`)
  drops its KV pool; usage while asleep is no load, and a pool that "emptied" then did not
  drain. A fact only when the engine slept.
"""

from __future__ import annotations

import polars as pl

from kvdiag.analyzer.diagnosis import Fact
from kvdiag.analyzer.facts.base import Facts, ref
from kvdiag.analyzer.facts.samples import SqlReader, samples
from kvdiag.domain.counters import counter_increase

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
_LEVELS = {"weights_offloaded": 1, "discard_all": 2}


def _label(name: str) -> pl.Expr:
    return pl.col("labels").str.json_path_match(f"$.{name}")


def prompt_source_facts(reader: SqlReader, facts: Facts) -> None:
    """prompt_tokens_computed_share: the share of prompt tokens prefilled here, per replica."""
    rows = samples(reader, "prompt_tokens_by_source", "total")
    if rows.is_empty():
        return
    rows = rows.with_columns(_label("source").alias("source"))
    replicas = rows["replica"].unique(maintain_order=True).to_list()
    found = []
    for replica in replicas:
        fact = _computed_share(rows.filter(pl.col("replica") == replica))
        if fact is not None:
            scope = (("replica", str(replica)),) if len(replicas) > 1 else ()
            found.append(Fact(fact.value, fact.unit, fact.source, fact.note, scope))
    if found:
        facts["prompt_tokens_computed_share"] = found[0] if len(found) == 1 else tuple(found)


def _computed_share(rows: pl.DataFrame) -> Fact | None:
    grown = {s: counter_increase(rows.filter(pl.col("source") == s)) for s in SOURCES}
    total = sum(grown.values())
    if total <= 0 or grown["local_compute"] >= total:
        return None
    parts = ", ".join(f"{s} {grown[s]:,.0f}" for s in SOURCES)
    note = f"prompt tokens by source over the window: {parts} (vllm:prompt_tokens_by_source)"
    last = rows.row(rows.height - 1, named=True)
    return Fact(round(grown["local_compute"] / total, 4), "ratio", ref(last), note)


def sleep_facts(reader: SqlReader, facts: Facts) -> None:
    """engine_slept: the deepest sleep level seen, with the first and last moment asleep."""
    rows = samples(reader, "engine_sleep_state")
    if rows.is_empty():
        return
    rows = rows.with_columns(_label("sleep_state").alias("state"))
    asleep = rows.filter((pl.col("state") == "awake") & (pl.col("value") == 0)).sort("ts")
    if asleep.is_empty():
        return
    levels = rows.filter(pl.col("state").is_in(list(_LEVELS)) & (pl.col("value") > 0))
    level = max((_LEVELS[s] for s in levels["state"].to_list()), default=None)
    first, last = asleep.row(0, named=True), asleep.row(asleep.height - 1, named=True)
    when = f"asleep in {asleep.height} samples from {first['ts']} to {last['ts']}"
    what = f"sleep level {level}" if level else "sleep level not stated"
    note = f"{when} ({what}): the KV pool is dropped while asleep; usage then is no load"
    facts["engine_slept"] = Fact(level or 0, "level", ref(first), note)
