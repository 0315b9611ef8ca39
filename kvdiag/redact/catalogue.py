"""The redaction categories and their patterns, loaded from categories.toml (data, not code)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvdiag.domain.errors import FormatPackError

HANDLERS = frozenset(
    {"value", "hostport", "url", "ipv4", "ipv6", "fqdn", "pod", "credential", "prompt"}
    | {"token_ids", "request_id"}
)


# categories.toml is bundled data, like the log format packs: malformed, it is kvdiag's bug.
CatalogueError = FormatPackError


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    found: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pattern:
    id: str
    category: str
    regex: re.Pattern[str]
    prefilter: str  # Rust-regex syntax (polars): true on every line where `regex` can match
    handler: str
    learn: bool  # a value found here is replaced in every file, wherever it appears
    samples: tuple[Sample, ...]
    near_misses: tuple[str, ...]

    def value_span(self, m: re.Match[str]) -> tuple[int, int]:
        """Where the replaced value sits in the match: group `v`, else the whole match."""
        return m.span("v") if "v" in self.regex.groupindex else m.span()


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    doc: str
    patterns: tuple[Pattern, ...]


def _pattern(category: str, raw: dict[str, object]) -> Pattern:
    where = f"{category}.{raw.get('id')}"
    handler = str(raw.get("handler", "value"))
    if handler not in HANDLERS:
        raise CatalogueError(f"{where}: unknown handler {handler!r}")
    try:
        regex = re.compile(str(raw["regex"]))
    except (KeyError, re.error) as exc:
        raise CatalogueError(f"{where}: bad or missing regex: {exc}") from exc
    samples = tuple(
        Sample(str(s["text"]), tuple(str(f) for f in s["found"]))
        for s in raw.get("samples", [])  # type: ignore[attr-defined]
    )
    if not samples:
        raise CatalogueError(f"{where}: a pattern needs samples")
    if "prefilter" not in raw:
        raise CatalogueError(f"{where}: a pattern needs a prefilter")
    return Pattern(
        id=str(raw["id"]),
        category=category,
        regex=regex,
        prefilter=str(raw["prefilter"]),
        handler=handler,
        learn=bool(raw.get("learn", False)),
        samples=samples,
        near_misses=tuple(str(t) for t in raw.get("near_misses", [])),  # type: ignore[attr-defined]
    )


def parse_catalogue(text: str) -> tuple[Category, ...]:
    data = tomllib.loads(text)
    if data.get("schema") != 1:
        raise CatalogueError("categories.toml: schema must be 1")
    out = []
    for raw in data["category"]:
        name = str(raw["name"])
        patterns = tuple(_pattern(name, p) for p in raw["pattern"])
        out.append(Category(name, str(raw["doc"]), patterns))
    return tuple(out)


def _text() -> str:
    return resources.files("kvdiag.redact").joinpath("categories.toml").read_text("utf-8")


@cache
def catalogue() -> tuple[Category, ...]:
    """The categories in the order they run."""
    return parse_catalogue(_text())


def category_names() -> tuple[str, ...]:
    """The categories' names in order, read without compiling their patterns: the command
    line offers them as choices, and every command (analyze too) would pay for compiling."""
    return tuple(str(raw["name"]) for raw in tomllib.loads(_text())["category"])
