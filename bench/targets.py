"""The performance issue's targets and the lines that judge a bench run against them."""

from __future__ import annotations

from typing import Any

# The issues' targets: ratios to baselines timed in the same run, and memory (issue 7).
# A steady log: issue 7 asked 4x grep -c; issue 31 restated it as 10x.
MAX_X_GREP = 10.0
MIN_X_PROMETHEUS_CLIENT = 20.0
MAX_PEAK_MIB = 512
MAX_FLAT_RATIO = 1.1  # largest log's peak RSS over the smallest's: "flat from 1 GB to 5 GB"
# Issue 31: a crash loop (a start-up every few hundred lines) within 20x grep -c, and the
# same memory target as the steady log's, whatever the number of starts.
MAX_X_GREP_CRASHLOOP = 20.0
# Issue 31: a small series pays kvdiag's fixed cost on few files: at most 1,000 scrapes
# need only 10x prometheus_client's time.
MIN_X_PROMETHEUS_CLIENT_SMALL = 10.0
SMALL_SCRAPES = 1000


def floor_line(r: dict[str, Any]) -> str:
    """What the logs target leaves once the floors are paid: kvdiag with next to nothing
    to read, plus polars reading the lines and testing one literal in each."""
    budget = MAX_X_GREP * float(r["grep_c_s"])
    floor = float(r["floor_s"])
    return (
        f"floor {r['input']}: kvdiag on the fixture's own log {r['kvdiag_fixed_s']:g} s + polars "
        f"counting one literal in every line {r['polars_count_s']:g} s = {floor:g} s "
        f"({r['floor_x_grep']:g}x grep -c) against a budget of {budget:.2f} s: "
        + ("under it" if floor <= budget else "over it before a line is parsed")
    )


def verdicts(results: list[dict[str, Any]]) -> list[str]:
    """One line per target: the measured value, the target, met or not."""

    def line(what: str, value: float, target: str, met: bool) -> str:
        return f"target {what}: {value:g} (target {target}) {'met' if met else 'NOT met'}"

    out = []
    for r in results:
        peak, name = float(r["peak_rss_mib"]), r["input"]
        if r["kind"] == "logs":
            x = float(r["x_grep"])
            out.append(line(f"{name} x grep -c", x, f"<= {MAX_X_GREP:g}", x <= MAX_X_GREP))
            out.append(floor_line(r))
        elif r["kind"] == "crashloop":
            x, most = float(r["x_grep"]), MAX_X_GREP_CRASHLOOP
            out.append(
                line(f"{name} ({r['starts']:,} starts) x grep -c", x, f"<= {most:g}", x <= most)
            )
        elif r["kind"] == "scrapes":
            x = float(r["speedup_vs_prometheus_client"])
            small = int(r.get("scrapes", 0)) <= SMALL_SCRAPES
            least = MIN_X_PROMETHEUS_CLIENT_SMALL if small else MIN_X_PROMETHEUS_CLIENT
            out.append(
                line(f"{name} faster than prometheus_client", x, f">= {least:g}", x >= least)
            )
        # manyreplicas, archive: the memory target only
        out.append(line(f"{name} peak RSS MiB", peak, f"<= {MAX_PEAK_MIB}", peak <= MAX_PEAK_MIB))
    logs = [float(r["peak_rss_mib"]) for r in results if r["kind"] == "logs"]
    if len(logs) > 1:
        ratio = round(logs[-1] / logs[0], 2)
        target = f"<= {MAX_FLAT_RATIO:g}"
        out.append(line("log peak RSS, largest / smallest", ratio, target, ratio <= MAX_FLAT_RATIO))
    return out
