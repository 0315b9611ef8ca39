#!/usr/bin/env python3
"""Estimate the KV payload ratio (tokens held / slots allocated) of a bundle
from its raw files (DERIVED; written for h-padding-waste and its twin).

Per 1-s scrape:
  allocated slots = round(kv_cache_usage_perc * (num_gpu_blocks - 1)) * block_size
      (usage is used blocks over the usable blocks; vLLM keeps one null block)
  held tokens     = sum over requests in decode at that instant (client saw
      the first token, not yet the end) of prompt_tokens + the share of
      completion_tokens generated so far (linear between first token and end)
  payload         = held tokens / allocated slots
and also running sequences per used block (num_requests_running / used blocks).
Client and server clocks are the same machine's, but the client sees each
token a little after the server made it, so per-scrape values are noisy; the
median over the busy scrapes is the number to quote.

Usage: /opt/vllmcpu/bin/python payload.py <bundle-dir>
"""
import glob
import json
import os
import statistics
import sys

from summarize import parse_scrape


def held_tokens(recs, t):
    total = 0.0
    n = 0
    for r in recs:
        ft, end = r.get("first_token_ts"), r.get("end_ts")
        if ft is None or end is None or not (ft <= t < end):
            continue
        frac = (t - ft) / (end - ft) if end > ft else 1.0
        total += (r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0) * frac
        n += 1
    return total, n


def main():
    d = sys.argv[1]
    recs = [json.loads(line) for line in
            open(os.path.join(d, "requests.jsonl")) if line.strip()]
    recs = [r for r in recs if r["status"] == "ok"]
    files = sorted(glob.glob(os.path.join(d, "metrics", "*.prom")),
                   key=lambda p: float(os.path.basename(p)[:-5]))
    info, rows = None, []
    for p in files:
        row, i = parse_scrape(p)
        row["ts"] = float(os.path.basename(p)[:-5])
        info = info or i
        rows.append(row)
    nb, bs = int(info["num_gpu_blocks"]), int(info["block_size"])
    out = []
    for row in rows:
        used = round(row["kv_cache_usage_perc"] * (nb - 1))
        if used == 0 or row["num_requests_running"] == 0:
            continue
        held, n_dec = held_tokens(recs, row["ts"])
        out.append({"ts": row["ts"], "used_blocks": used,
                    "running": row["num_requests_running"],
                    "decoding_client": n_dec, "held_tokens": round(held),
                    "allocated_slots": used * bs,
                    "payload": held / (used * bs),
                    "seqs_per_block": row["num_requests_running"] / used})
    if not out:
        sys.exit("no busy scrape")
    busy = [o for o in out if o["running"] >= 0.5 * max(x["running"] for x in out)]
    summary = {
        "block_size": bs, "num_gpu_blocks": nb, "busy_scrapes": len(busy),
        "median_used_blocks": statistics.median(o["used_blocks"] for o in busy),
        "median_running": statistics.median(o["running"] for o in busy),
        "median_held_tokens": statistics.median(o["held_tokens"] for o in busy),
        "median_allocated_slots": statistics.median(
            o["allocated_slots"] for o in busy),
        "median_payload": round(statistics.median(o["payload"] for o in busy), 3),
        "median_seqs_per_used_block": round(statistics.median(
            o["seqs_per_block"] for o in busy), 3),
        "mean_prompt_tokens": round(statistics.mean(
            r["prompt_tokens"] for r in recs), 1),
        "mean_completion_tokens": round(statistics.mean(
            r["completion_tokens"] for r in recs), 1),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
