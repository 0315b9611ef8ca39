"""Property: random samples rendered as exposition text parse back to what was rendered."""

from __future__ import annotations

import json
import math
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvdiag.analyzer.schema.aliases import load_aliases
from tests.metric_support import ingest, same_value, write

LOOKUP = load_aliases().lookup_map()
NAMES = sorted(LOOKUP)
# \x1f is the line reader's column separator and is read as a space (documented).
LABEL_TEXT = st.text(st.characters(exclude_characters="\x1f", exclude_categories=("Cs",)))
LABEL_KEY = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
MILLIS = st.integers(min_value=10**12, max_value=4 * 10**12)


def _go_float(value: float, spelling: int) -> str:
    """How exposition writers spell a float (client libraries differ on NaN and Inf)."""
    if math.isnan(value):
        return ("NaN", "nan", "NaN")[spelling]
    if math.isinf(value):
        return ("+Inf", "inf", "Inf")[spelling] if value > 0 else ("-Inf", "-inf", "-Inf")[spelling]
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


SAMPLE = st.fixed_dictionaries(
    {
        "name": st.sampled_from(NAMES),
        "labels": st.dictionaries(LABEL_KEY, LABEL_TEXT, max_size=4),
        "value": FLOATS,
        "spelling": st.integers(0, 2),
        "millis": st.none() | MILLIS,
        "seconds": st.booleans(),  # OpenMetrics writes seconds, 0.0.4 milliseconds
        "gap": st.sampled_from([" ", "\t", "  "]),
        "trailing_comma": st.booleans(),
        "exemplar": st.booleans(),
    }
)


def _render(s: dict) -> str:
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s["labels"].items())
    if labels and s["trailing_comma"]:
        labels += ","
    head = f"{s['name']}{{{labels}}}" if labels or s["trailing_comma"] else s["name"]
    line = f"{head}{s['gap']}{_go_float(s['value'], s['spelling'])}"
    if s["millis"] is not None:
        ms = s["millis"]
        line += s["gap"] + (f"{ms // 1000}.{ms % 1000:03d}" if s["seconds"] else str(ms))
    if s["exemplar"]:
        line += ' # {trace_id="x"} 1.0'
    return line


# Found by CI: a label quoting nvidia-smi's `--query-gpu=` made the scrape sniff as nvidia-smi.
NVSMI_QUOTE = {
    "name": "DCGM_FI_DEV_FB_FREE",
    "labels": {"A": "--query-gpu="},
    "value": 0.0,
    "spelling": 0,
    "millis": None,
    "seconds": False,
    "gap": " ",
    "trailing_comma": False,
    "exemplar": False,
}


@settings(max_examples=100, deadline=None)
@given(st.lists(SAMPLE, min_size=1, max_size=12))
@example([NVSMI_QUOTE])
@example([{**NVSMI_QUOTE, "labels": {"A": "<nvidia_smi_log> NVIDIA-SMI 535"}}])
def test_rendered_samples_parse_back_equal(samples: list[dict]) -> None:
    lines = ["# HELP x y", "# TYPE x gauge"]
    for s in samples:
        lines.append(_render(s))
        lines.append("# HELP between samples")
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp), "metrics.prom", "\n".join(lines) + "\n")
        got = ingest(Path(tmp))
    acct = got.account("metrics.prom")
    assert acct.lines_unmatched == 0 and acct.balanced()
    rows = got.table("metric_samples").sort("source_line").to_dicts()
    assert len(rows) == len(samples)
    for s, row in zip(samples, rows, strict=True):
        assert row["name"] == s["name"]
        assert (row["metric"], row["suffix"]) == LOOKUP[s["name"]]
        assert json.loads(row["labels"]) == s["labels"]
        assert same_value(row["value"], s["value"])
        if s["millis"] is None:
            assert row["ts"] is None
        else:
            want = datetime.fromtimestamp(s["millis"] / 1000, tz=UTC).replace(tzinfo=None)
            assert row["ts"] == want
