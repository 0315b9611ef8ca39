#!/usr/bin/env python3
"""Print a markdown table of per-phase numbers for a bundle (DERIVED; the raw
files are only read). Written for the concurrency ramp (i-ramp) and the
replica split (g), where summarize.py's whole-run peaks hide the phases.

For each load phase the window is [first send_ts, last send_ts] of its
requests (closed-loop phases send until their duration_s ends). Per window:
  - output tok/s: delta of vllm:generation_tokens_total over the window
    (first and last scrape inside it), divided by the scrapes' time span;
  - requests/s finished: delta of vllm:request_success_total, same way;
  - mean queue s: delta of request_queue_time_seconds sum / count;
  - max waiting, max running, peak kv_cache_usage_perc, preemptions (delta);
  - client TTFT p50/p99 of the phase's own requests.

Usage: /opt/vllmcpu/bin/python phase_table.py <bundle-dir>
           [--requests FILE --replica NAME]   (as for summarize.py)
"""
import glob
import json
import os
import sys

from summarize import parse_scrape, pct


def opt(name):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return None


def scrapes(d):
    files = sorted(glob.glob(os.path.join(d, "metrics", "*.prom")),
                   key=lambda p: float(os.path.basename(p)[:-5]))
    rows = []
    for p in files:
        row, _ = parse_scrape(p)
        row["ts"] = float(os.path.basename(p)[:-5])
        rows.append(row)
    return rows


def delta(a, b, key):
    return b[key] - a[key]


def phase_row(name, recs, rows):
    t0 = min(r["send_ts"] for r in recs)
    t1 = max(r["send_ts"] for r in recs)
    win = [r for r in rows if t0 <= r["ts"] <= t1]
    ok = [r for r in recs if r["status"] == "ok"]
    tt = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    out = {"phase": name, "requests": len(recs), "window_s": round(t1 - t0, 1)}
    if len(win) >= 2:
        a, b = win[0], win[-1]
        span = b["ts"] - a["ts"]
        qn = delta(a, b, "queue_time_count")
        out.update({
            "out_tok_s": round(delta(a, b, "generation_tokens_total") / span, 1),
            "req_s": round(delta(a, b, "request_success_total") / span, 2),
            "mean_queue_s": round(delta(a, b, "queue_time_sum") / qn, 3)
            if qn else None,
            "max_waiting": max(r["num_requests_waiting"] for r in win),
            "max_running": max(r["num_requests_running"] for r in win),
            "peak_kv": round(max(r["kv_cache_usage_perc"] for r in win), 3),
            "preemptions": delta(a, b, "num_preemptions_total"),
        })
    out["ttft_p50"] = pct(tt, 50)
    out["ttft_p99"] = pct(tt, 99)
    return out


def main():
    d = sys.argv[1]
    rq = opt("--requests") or os.path.join(d, "requests.jsonl")
    recs = [json.loads(line) for line in open(rq) if line.strip()]
    if opt("--replica"):
        recs = [r for r in recs if r.get("replica") == opt("--replica")]
    rows = scrapes(d)
    phases = sorted({r["phase"] for r in recs},
                    key=lambda p: min(r["send_ts"] for r in recs
                                      if r["phase"] == p))
    table = [phase_row(p, [r for r in recs if r["phase"] == p], rows)
             for p in phases]
    cols = ["phase", "requests", "window_s", "out_tok_s", "req_s",
            "mean_queue_s", "ttft_p50", "ttft_p99", "max_waiting",
            "max_running", "peak_kv", "preemptions"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for t in table:
        print("| " + " | ".join(str(t.get(c, "")) for c in cols) + " |")


if __name__ == "__main__":
    main()
