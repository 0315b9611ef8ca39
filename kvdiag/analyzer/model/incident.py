"""The incident model: the one door through which judgement and the commands see an analysis.

An `Incident` holds the store's reader (privately) and the facts established from it, and
answers in named quantities: a fact by name, a config key as the engine stated it, the
evidence behind a stored row, the load profile with each measure's source, the traffic to
replay, the step windows a step-time model is fitted to. The rules see it through their
context (rules/base.py's RuleContext is an Incident with a rule's thresholds); `compare`,
`plan` and the redaction check take it from the pipeline. None of them opens the store.

Below the named quantities it still answers read queries (`sql`, `scalar`, `memo`,
`has_rows`): the quantity computations in this package (queries.py, quantities/) are
written in them, and a rule may ask a question no quantity answers yet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from kvdiag.analyzer.model.effective import EngineContext, effective_value
from kvdiag.analyzer.model.first_stated import first_config_rows
from kvdiag.analyzer.model.profile import Profile, profile
from kvdiag.analyzer.model.queries import histogram_buckets
from kvdiag.analyzer.model.reads import excerpt, fmt_ts
from kvdiag.analyzer.model.stated import Stated, stated_settings
from kvdiag.analyzer.model.traffic import DEFAULT_SEED, Traffic, traffic
from kvdiag.analyzer.model.work import StepWindows, observed_drain, step_windows
from kvdiag.analyzer.store.database import StoreReader
from kvdiag.analyzer.store.kept import KeptStore
from kvdiag.domain.records.diagnosis import Evidence, Fact

T = TypeVar("T")


class Incident:
    """One analysed incident: its facts and the quantities read from its store."""

    def __init__(
        self, reader: StoreReader, facts: Mapping[str, Fact | tuple[Fact, ...]] | None = None
    ) -> None:
        self._reader = reader
        self.facts: Mapping[str, Fact | tuple[Fact, ...]] = facts if facts is not None else {}

    def _shares(self) -> StoreReader:
        """The reader, for a context built on this incident (RuleContext) to share."""
        return self._reader

    # Read queries: what the quantity computations are written in.
    def sql(
        self, query: str, params: Sequence[Any] | None = None, *, large_result: bool = False
    ) -> pl.DataFrame:
        return self._reader.sql(query, params, large_result=large_result)

    def scalar(self, query: str, params: Sequence[Any] | None = None) -> Any:
        return self._reader.scalar(query, params)

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        return self._reader.memo(key, compute)

    def has_rows(self, table_name: str) -> bool:
        return self._reader.has_rows(table_name)

    def empty(self, table_name: str) -> pl.DataFrame:
        return self._reader.empty(table_name)

    def count(self, table_name: str) -> int:
        return self._reader.count(table_name)

    def line_text(self, source_path: str, line: int) -> str | None:
        return self._reader.line_text(source_path, line)

    def release(self) -> None:
        """Let go of the memoised frames (StoreReader.release)."""
        self._reader.release()

    # Facts and stated settings.
    def fact_value(self, name: str) -> Any:
        """A single fact's value, or None when absent (or per-scope only)."""
        fact = self.facts.get(name)
        return fact.value if isinstance(fact, Fact) else None

    def fact(self, name: str, replica: str | None = None) -> Fact | None:
        """A fact, or its value for one replica when it is scoped per replica."""
        fact = self.facts.get(name)
        if isinstance(fact, Fact):
            return fact
        if fact and replica is not None:
            for f in fact:
                if dict(f.scope).get("replica") == replica:
                    return f
        return None

    def config(self, key: str, replica: str | None = None) -> dict[str, Any] | None:
        """The stated value of a config key (with its provenance row), or None.

        Sources rank as the facts rank them (effective.py): the engine's resolved config in
        metrics, then its log, then the launch command; aliases such as cache_config_info's
        `cache_dtype` count as the key. Rows recorded as defaults come last.
        """
        rows = self.memo(("config", replica), lambda: self._config_rows(replica))
        found = effective_value(key, rows, EngineContext())
        if found is not None and found.row is not None:
            return {**found.row, "value": found.value}
        defaults = [r for r in rows if r.get("key") == key and r.get("origin") == "default"]
        return dict(defaults[0]) if defaults else None

    def _config_rows(self, replica: str | None) -> list[dict[str, Any]]:
        """The config table's first statements (read once for all replicas), or one replica's:
        the later ones never win (first_stated.py)."""
        rows = self.memo("config_rows", lambda: self.sql(first_config_rows()).to_dicts())
        return rows if replica is None else [r for r in rows if r.get("replica") == replica]

    # Evidence: a stored row as file, line, time and text.
    def evidence(self, row: Mapping[str, Any], what: str, value: Any) -> Evidence:
        """Evidence from a store row that carries provenance columns (a metric sample's
        file, line and text are read back by its `sample_row` when the row lacks them; a
        line stored by reference is read from its file)."""
        if row.get("sample_row") is not None and (
            row.get("raw") is None or "source_path" not in row
        ):
            source = self.sample_source(int(row["sample_row"]))
            row = {**row, **source} if source is not None else row
        line = row.get("source_line")
        raw = row.get("raw")
        if raw is None and "raw" in row and line is not None and row.get("source_path"):
            raw = self.line_text(str(row["source_path"]), int(line))  # by reference
        return Evidence(
            path=str(row.get("source_path")),
            line=int(line) if line is not None else None,
            ts=fmt_ts(row.get("ts")),
            what=what,
            value=value,
            excerpt=excerpt(raw),
        )

    def sample_source(self, row_id: int) -> dict[str, Any] | None:
        """The file, line and text of a metric sample by its `sample_row`, read once."""
        query = "SELECT source_path, source_line, raw FROM metric_samples WHERE sample_row = ?"
        found = self.memo(("sample", row_id), lambda: self.sql(query, [row_id]))
        return found.row(0, named=True) if found.height else None

    # Named quantities: what the commands read (each says its source).
    def profile(self) -> Profile:
        """The load the run carried and what its users saw, each measure with its source."""
        return profile(self)

    def stated_settings(self) -> dict[str, Stated]:
        """The engine settings as the run stated them (flags, config, the card)."""
        return stated_settings(self, self.facts)

    def traffic(self, seed: int = DEFAULT_SEED) -> Traffic:
        """The run's requests as the simulator replays them (traffic.py)."""
        return traffic(self, seed)

    def step_windows(self, pool_tokens: int) -> StepWindows:
        """The windows of work a step-time model is fitted to (work.py)."""
        return step_windows(self, pool_tokens)

    def observed_drain(self) -> float | None:
        """The longest stretch with requests waiting, in seconds (work.py)."""
        return observed_drain(self)

    def histogram_edges(self, metric: str) -> list[float]:
        """The engine's own bucket bounds of a histogram (empty when none was scraped)."""
        return [le for le, _ in histogram_buckets(self, metric)]


@contextlib.contextmanager
def kept_incident(
    db: Path, facts: Mapping[str, Fact | tuple[Fact, ...]] | None = None
) -> Iterator[Incident]:
    """The incident a kept database (`analyze --db`) holds, open for the `with` block.

    Raises NoInputError when the file is not such a database.
    """
    kept = KeptStore(db)
    try:
        yield Incident(kept.reader, facts)
    finally:
        kept.close()
