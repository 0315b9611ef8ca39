#!/usr/bin/env python3
"""Read a scenario bundle (server.log, metrics/, requests.jsonl) and write
DERIVED files under <bundle>/derived/ (the raw files are never touched):

  derived/timeseries.csv  one row per scrape: selected vLLM gauges/counters
  derived/summary.json    peaks/totals from metrics, client stats, log facts

Usage: /opt/vllmcpu/bin/python summarize.py <bundle-dir> [--print]
           [--requests FILE --replica NAME]
  --requests/--replica (two-replica bundles, see run_replicas.py): take the
  client records from FILE (default <bundle-dir>/requests.jsonl), keeping only
  the lines whose "replica" field is NAME.
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

from prometheus_client.parser import text_string_to_metric_families

STATS_RE = re.compile(
    r"Engine (\d+): Avg prompt throughput: ([\d.]+) tokens/s, "
    r"Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs, "
    r"Waiting: (\d+) reqs(?P<rest>.*)")

COLS = ["ts", "kv_cache_usage_perc", "num_requests_running",
        "num_requests_waiting", "waiting_capacity", "waiting_deferred",
        "num_preemptions_total", "prefix_cache_queries_total",
        "prefix_cache_hits_total", "prompt_tokens_total",
        "generation_tokens_total", "request_success_total",
        "admission_rejections_total", "queue_time_sum", "queue_time_count",
        "ttft_sum", "ttft_count"]


def parse_scrape(path):
    row = {c: 0.0 for c in COLS}
    info = None
    text = open(path, encoding="utf-8").read()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            n, lab, v = s.name, s.labels, s.value
            if n == "vllm:kv_cache_usage_perc":
                row["kv_cache_usage_perc"] = v
            elif n == "vllm:num_requests_running":
                row["num_requests_running"] = v
            elif n == "vllm:num_requests_waiting":
                row["num_requests_waiting"] = v
            elif n == "vllm:num_requests_waiting_by_reason":
                row["waiting_" + lab.get("reason", "?")] = v
            elif n == "vllm:num_preemptions_total":
                row["num_preemptions_total"] = v
            elif n == "vllm:prefix_cache_queries_total":
                row["prefix_cache_queries_total"] = v
            elif n == "vllm:prefix_cache_hits_total":
                row["prefix_cache_hits_total"] = v
            elif n == "vllm:prompt_tokens_total":
                row["prompt_tokens_total"] = v
            elif n == "vllm:generation_tokens_total":
                row["generation_tokens_total"] = v
            elif n == "vllm:request_success_total":
                row["request_success_total"] += v
            elif n == "vllm:admission_rejections_total":
                row["admission_rejections_total"] += v
            elif n == "vllm:request_queue_time_seconds_sum":
                row["queue_time_sum"] = v
            elif n == "vllm:request_queue_time_seconds_count":
                row["queue_time_count"] = v
            elif n == "vllm:time_to_first_token_seconds_sum":
                row["ttft_sum"] = v
            elif n == "vllm:time_to_first_token_seconds_count":
                row["ttft_count"] = v
            elif n == "vllm:cache_config_info":
                info = lab
    return row, info


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return round(xs[f] + (xs[c] - xs[f]) * (k - f), 4)


def opt(name):
    """Value after `name` on the command line, or None."""
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return None


def main():
    d = sys.argv[1]
    os.makedirs(os.path.join(d, "derived"), exist_ok=True)
    files = sorted(glob.glob(os.path.join(d, "metrics", "*.prom")),
                   key=lambda p: float(os.path.basename(p)[:-5]))
    rows, info = [], None
    for p in files:
        row, i = parse_scrape(p)
        row["ts"] = float(os.path.basename(p)[:-5])
        rows.append(row)
        info = info or i
    with open(os.path.join(d, "derived", "timeseries.csv"), "w",
              newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLS)
        w.writeheader()
        for r in rows:
            w.writerow(r)

    s = {"n_scrapes": len(rows)}
    if info:
        s["cache_config_info"] = {k: info.get(k) for k in (
            "num_gpu_blocks", "block_size", "kv_cache_memory_bytes",
            "kv_cache_size_tokens", "kv_cache_max_concurrency",
            "enable_prefix_caching", "num_gpu_blocks_override")}
    if rows:
        last = rows[-1]
        peak_kv = max(rows, key=lambda r: r["kv_cache_usage_perc"])
        s["metrics"] = {
            "peak_kv_cache_usage_perc": round(peak_kv["kv_cache_usage_perc"], 4),
            "peak_kv_ts": peak_kv["ts"],
            "seconds_kv_usage_ge_0.9": sum(
                1 for r in rows if r["kv_cache_usage_perc"] >= 0.9),
            "max_num_requests_running": max(r["num_requests_running"]
                                            for r in rows),
            "max_num_requests_waiting": max(r["num_requests_waiting"]
                                            for r in rows),
            "max_waiting_capacity": max(r["waiting_capacity"] for r in rows),
            "max_waiting_deferred": max(r["waiting_deferred"] for r in rows),
            "final_num_preemptions_total": last["num_preemptions_total"],
            "final_prefix_cache_queries_total": last[
                "prefix_cache_queries_total"],
            "final_prefix_cache_hits_total": last["prefix_cache_hits_total"],
            "prefix_cache_hit_ratio": (
                round(last["prefix_cache_hits_total"]
                      / last["prefix_cache_queries_total"], 4)
                if last["prefix_cache_queries_total"] else None),
            "final_prompt_tokens_total": last["prompt_tokens_total"],
            "final_generation_tokens_total": last["generation_tokens_total"],
            "final_request_success_total": last["request_success_total"],
            "final_admission_rejections_total": last[
                "admission_rejections_total"],
            "mean_queue_time_s": (round(last["queue_time_sum"]
                                        / last["queue_time_count"], 4)
                                  if last["queue_time_count"] else None),
            "mean_ttft_s_server": (round(last["ttft_sum"] / last["ttft_count"],
                                         4) if last["ttft_count"] else None),
        }

    rq = opt("--requests") or os.path.join(d, "requests.jsonl")
    if os.path.exists(rq):
        recs = [json.loads(l) for l in open(rq) if l.strip()]
        if opt("--replica"):
            recs = [r for r in recs if r.get("replica") == opt("--replica")]
        ok = [r for r in recs if r["status"] == "ok"]
        by_status = {}
        for r in recs:
            key = f"{r['status']}:{r['http_status']}"
            by_status[key] = by_status.get(key, 0) + 1
        phases = sorted({r["phase"] for r in recs})
        s["client"] = {"n_requests": len(recs), "by_status": by_status,
                       "span_s": round(max(r["end_ts"] for r in recs)
                                       - min(r["send_ts"] for r in recs), 2)
                       if recs else None}
        for ph in phases:
            pr = [r for r in ok if r["phase"] == ph]
            tt = [r["ttft_s"] for r in pr if r["ttft_s"] is not None]
            e2e = [r["e2e_s"] for r in pr]
            pt = [r["prompt_tokens"] for r in pr if r["prompt_tokens"]]
            s["client"][f"phase:{ph}"] = {
                "n_ok": len(pr),
                "n_total": sum(1 for r in recs if r["phase"] == ph),
                "prompt_tokens_mean": round(statistics.mean(pt), 1) if pt
                else None,
                "max_tokens": sorted({r["max_tokens"] for r in pr})[:5],
                "ttft_p50": pct(tt, 50), "ttft_p90": pct(tt, 90),
                "ttft_p99": pct(tt, 99), "ttft_max": max(tt) if tt else None,
                "e2e_p50": pct(e2e, 50), "e2e_p99": pct(e2e, 99),
                "e2e_max": max(e2e) if e2e else None,
            }
        errs = {}
        for r in recs:
            if r["status"] != "ok" and r["error"]:
                errs.setdefault(r["error"][:300], 0)
                errs[r["error"][:300]] += 1
        s["client"]["error_samples"] = errs

    log = os.path.join(d, "server.log")
    if os.path.exists(log):
        lines = open(log, encoding="utf-8", errors="replace").read().splitlines()
        stats = []
        for l in lines:
            m = STATS_RE.search(l)
            if m:
                rest = m.group("rest")
                kv = re.search(r"KV cache usage: ([\d.]+)%", rest)
                pre = re.search(r"Preemptions: (\d+)", rest)
                stats.append({"running": int(m.group(4)),
                              "waiting": int(m.group(5)),
                              "kv": float(kv.group(1)) if kv else None,
                              "preempt": int(pre.group(1)) if pre else 0,
                              "prompt_tps": float(m.group(2)),
                              "gen_tps": float(m.group(3))})
        s["server_log"] = {
            "n_lines": len(lines),
            "n_stats_lines": len(stats),
            "max_kv_usage_pct_in_stats": max((x["kv"] for x in stats
                                              if x["kv"] is not None),
                                             default=None),
            "max_waiting_in_stats": max((x["waiting"] for x in stats),
                                        default=None),
            "max_running_in_stats": max((x["running"] for x in stats),
                                        default=None),
            "sum_preemptions_in_stats": sum(x["preempt"] for x in stats),
            "n_stats_lines_with_preemptions": sum(1 for x in stats
                                                  if x["preempt"]),
            "max_prompt_tps": max((x["prompt_tps"] for x in stats),
                                  default=None),
            "max_gen_tps": max((x["gen_tps"] for x in stats), default=None),
            "kv_size_lines": [l for l in lines if "KV cache size" in l
                              or "for KV cache" in l],
            "error_lines": [l for l in lines if " ERROR " in l
                            or "Error" in l][:15],
            "http_status_counts": {},
        }
        for l in lines:
            m = re.search(r'HTTP/1\.1" (\d{3})', l)
            if m:
                c = s["server_log"]["http_status_counts"]
                c[m.group(1)] = c.get(m.group(1), 0) + 1
    json.dump(s, open(os.path.join(d, "derived", "summary.json"), "w"),
              indent=1)
    if "--print" in sys.argv:
        print(json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
