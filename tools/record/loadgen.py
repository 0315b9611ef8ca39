#!/usr/bin/env python3
"""Bounded load generator for a vLLM OpenAI-compatible server (loopback only).

Sends streaming POST /v1/completions requests with `max_tokens` and
`ignore_eos: true` (so output length is controlled) and writes one JSON line per
request to --out:

  {"req": "long-007", "phase": "long", "send_ts": <unix s>, "first_token_ts": ..,
   "end_ts": .., "ttft_s": .., "e2e_s": .., "target_prompt_tokens": 1000,
   "prompt_tokens": 1003 (server-reported usage), "max_tokens": 1000,
   "completion_tokens": 1000, "shared_prefix_tokens": 0, "http_status": 200,
   "status": "ok" | "http_error" | "stream_error" | "exception" | "timeout",
   "error": null | "<server error body / exception text>", "finish_reason": "length"}

Timestamps are wall-clock unix seconds (time.time()) so they line up with the
metrics scrapes and the server log (the server log prints local time to 1 s).
TTFT = first SSE chunk carrying a choice (as `vllm bench serve` does),
measured client-side.

Load is described by a JSON spec:
  {"seed": 1, "timeout_s": 900, "phases": [
     {"name": "long", "count": 32, "start_s": 0,
      "arrival": "burst" | "rate" | "closed",
      "rate_rps": 2.0,            # arrival == "rate": Poisson arrivals
      "concurrency": 4,           # arrival == "closed": N workers back to back
      "prompt_tokens": [900, 1100],   # uniform range, inclusive
      "max_tokens": [1000, 1000],
      "shared_prefix_tokens": 0,  # >0: every request of the phase starts with
                                  # the same prefix text of ~this many tokens
      "prefix_seed": 7,
      "duration_s": 30,           # arrival == "closed" only (optional): the
                                  # workers start no new request after this
                                  # many seconds; count is then an upper bound
      "replica": "a"}]}           # optional: send this phase to the URL given
                                  # by --replica a=http://127.0.0.1:8041
                                  # (default --base-url); recorded per request
Prompts are slices of local text (CPython stdlib sources) tokenized with the
served model's own tokenizer, so lengths are close to the target; the exact
count the server saw is taken from the `usage` chunk (stream_options).
The generator only ever talks to --base-url (and --replica URLs), which must be
loopback addresses.
"""
import argparse
import asyncio
import glob
import json
import os
import random
import sys
import time
from urllib.parse import urlparse

import aiohttp
from transformers import AutoTokenizer


def load_corpus_ids(tok, max_chars=3_000_000):
    stdlib = os.path.dirname(os.__file__)
    text = []
    total = 0
    for f in sorted(glob.glob(os.path.join(stdlib, "*.py"))):
        try:
            t = open(f, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        text.append(t)
        total += len(t)
        if total > max_chars:
            break
    return tok("\n".join(text), add_special_tokens=False)["input_ids"]


class PromptMaker:
    def __init__(self, tok, ids, seed):
        self.tok = tok
        self.ids = ids
        self.rng = random.Random(seed)
        self.prefix_cache = {}

    def _slice_text(self, n, rng):
        start = rng.randrange(0, len(self.ids) - n - 1)
        return self.tok.decode(self.ids[start:start + n])

    def prefix(self, n, seed):
        key = (n, seed)
        if key not in self.prefix_cache:
            self.prefix_cache[key] = self._slice_text(n, random.Random(seed))
        return self.prefix_cache[key]

    def make(self, n_total, shared_prefix_tokens=0, prefix_seed=0):
        if shared_prefix_tokens > 0:
            user_n = max(1, n_total - shared_prefix_tokens)
            return (self.prefix(shared_prefix_tokens, prefix_seed)
                    + "\n\n### Request\n" + self._slice_text(user_n, self.rng))
        return self._slice_text(n_total, self.rng)


async def one_request(session, args, rec, prompt, out_f, lock, timeout_s):
    base_url = args.replica_urls.get(rec.get("replica"), args.base_url)
    payload = {
        "model": args.model,
        "prompt": prompt,
        "max_tokens": rec["max_tokens"],
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    rec.update(send_ts=time.time(), first_token_ts=None, end_ts=None,
               ttft_s=None, e2e_s=None, prompt_tokens=None,
               completion_tokens=None, http_status=None, status=None,
               error=None, finish_reason=None, n_chunks=0)
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(base_url + "/v1/completions",
                                    json=payload) as resp:
                rec["http_status"] = resp.status
                if resp.status != 200:
                    body = await resp.text()
                    rec["status"] = "http_error"
                    rec["error"] = body[:2000]
                else:
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        buf += chunk
                        while b"\n" in buf:
                            line, buf = buf.split(b"\n", 1)
                            line = line.strip()
                            if not line.startswith(b"data:"):
                                continue
                            data = line[5:].strip()
                            if data == b"[DONE]":
                                continue
                            try:
                                obj = json.loads(data)
                            except ValueError:
                                continue
                            if "error" in obj:
                                rec["status"] = "stream_error"
                                rec["error"] = json.dumps(obj["error"])[:2000]
                                continue
                            for ch in obj.get("choices") or []:
                                # like `vllm bench serve`: the first chunk that
                                # carries a choice counts as the first token
                                # (its text can be "" when a byte-level token
                                # is an incomplete UTF-8 sequence)
                                rec["n_chunks"] += 1
                                if rec["first_token_ts"] is None:
                                    rec["first_token_ts"] = time.time()
                                if ch.get("finish_reason"):
                                    rec["finish_reason"] = ch["finish_reason"]
                            usage = obj.get("usage")
                            if usage:
                                rec["prompt_tokens"] = usage.get("prompt_tokens")
                                rec["completion_tokens"] = usage.get(
                                    "completion_tokens")
                    if rec["status"] is None:
                        rec["status"] = "ok"
    except TimeoutError:
        rec["status"] = "timeout"
        rec["error"] = f"client timeout after {timeout_s}s"
    except Exception as e:  # noqa: BLE001 - record whatever happened
        rec["status"] = "exception"
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
    rec["end_ts"] = time.time()
    rec["e2e_s"] = round(rec["end_ts"] - rec["send_ts"], 4)
    if rec["first_token_ts"] is not None:
        rec["ttft_s"] = round(rec["first_token_ts"] - rec["send_ts"], 4)
    async with lock:
        out_f.write(json.dumps(rec) + "\n")
        out_f.flush()


def rand_range(rng, r):
    lo, hi = (r, r) if isinstance(r, int) else (r[0], r[1])
    return rng.randint(lo, hi)


async def run_phase(session, args, ph, maker, out_f, lock, t0, timeout_s, rng):
    await asyncio.sleep(max(0.0, t0 + ph.get("start_s", 0) - time.time()))
    n = ph["count"]
    recs = []
    for i in range(n):
        recs.append({
            "req": f"{ph['name']}-{i:03d}",
            "phase": ph["name"],
            "target_prompt_tokens": rand_range(rng, ph["prompt_tokens"]),
            "max_tokens": rand_range(rng, ph["max_tokens"]),
            "shared_prefix_tokens": ph.get("shared_prefix_tokens", 0),
        })
        if "replica" in ph:
            recs[-1]["replica"] = ph["replica"]
    prompts = [maker.make(r["target_prompt_tokens"],
                          ph.get("shared_prefix_tokens", 0),
                          ph.get("prefix_seed", 0)) for r in recs]
    arrival = ph.get("arrival", "burst")
    tasks = []
    if arrival == "burst":
        for r, p in zip(recs, prompts):
            tasks.append(asyncio.create_task(
                one_request(session, args, r, p, out_f, lock, timeout_s)))
            await asyncio.sleep(ph.get("stagger_s", 0.0))
    elif arrival == "rate":
        rate = ph["rate_rps"]
        for r, p in zip(recs, prompts):
            tasks.append(asyncio.create_task(
                one_request(session, args, r, p, out_f, lock, timeout_s)))
            await asyncio.sleep(rng.expovariate(rate))
    elif arrival == "closed":
        q = list(zip(recs, prompts))
        stop_at = (time.time() + ph["duration_s"]) if "duration_s" in ph \
            else float("inf")

        async def worker():
            while q and time.time() < stop_at:
                r, p = q.pop(0)
                await one_request(session, args, r, p, out_f, lock, timeout_s)
        tasks = [asyncio.create_task(worker())
                 for _ in range(ph["concurrency"])]
    else:
        raise ValueError(arrival)
    await asyncio.gather(*tasks)


async def main_async(args, spec):
    for url in [args.base_url, *args.replica_urls.values()]:
        host = urlparse(url).hostname
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.exit(f"refusing non-loopback target {host}")
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    ids = load_corpus_ids(tok)
    seed = spec.get("seed", 1)
    maker = PromptMaker(tok, ids, seed)
    rng = random.Random(seed + 1)
    timeout_s = spec.get("timeout_s", 900)
    conn = aiohttp.TCPConnector(limit=0)
    lock = asyncio.Lock()
    t0 = time.time() + 0.5
    with open(args.out, "a") as out_f:
        async with aiohttp.ClientSession(
                connector=conn,
                timeout=aiohttp.ClientTimeout(total=None)) as session:
            await asyncio.gather(*[
                run_phase(session, args, ph, maker, out_f, lock, t0,
                          timeout_s, random.Random(rng.random()))
                for ph in spec["phases"]])
    print(f"loadgen done at {time.time():.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8011")
    ap.add_argument("--model", default="/opt/tinymodel")
    ap.add_argument("--tokenizer", default="/opt/tinymodel")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--replica", action="append", default=[],
                    metavar="NAME=URL",
                    help="base URL for phases with \"replica\": NAME")
    args = ap.parse_args()
    args.replica_urls = dict(r.split("=", 1) for r in args.replica)
    spec = json.load(open(args.spec))
    asyncio.run(main_async(args, spec))


if __name__ == "__main__":
    main()
