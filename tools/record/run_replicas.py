#!/usr/bin/env python3
"""Run one scenario against TWO OR MORE vLLM servers (replicas) and leave a bundle:

  replica-<name>/server.log      stdout+stderr of that replica's server, verbatim
  replica-<name>/metrics/        its own 1-s /metrics scrapes (scrape_metrics.py)
  replica-<name>/launch.txt      exact argv, env, versions, model config, PID
  replica-<name>/run_meta.json   that server's timeline and exit code
  requests.jsonl                 client-side record of all requests; each line
                                 carries "replica": <name> (loadgen.py)
  run_meta.json, scenario.json, client.log   as in run_scenario.py

This is run_scenario.py generalised to several servers; it reuses its helpers
so that launch.txt and the server environment are built the same way.
Every replica gets identical flags (scenario "server_args" / "env"); only the
port differs. The load spec routes each phase to a replica with "replica".

Usage:
  /opt/vllmcpu/bin/python run_replicas.py --scenario scenarios/g.json --out DIR

Scenario JSON: as for run_scenario.py plus
  {"replicas": {"a": 8041, "b": 8042}, ...}   # name -> port (127.0.0.1)
Servers and scrapers are stopped with SIGTERM to their own PIDs (SIGKILL to
that PID only if it has not exited 90 s later).
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from run_scenario import HERE, MODEL, VENV_PY, cpu_info, http_ok, versions


def write_launch(path, set_env, env, argv, vers, machine):
    """launch.txt exactly as run_scenario.py writes it."""
    with open(path, "w") as lf:
        lf.write("# exact server command line (argv, shell-quoted)\n")
        lf.write("env " + " ".join(f"{k}={shlex.quote(v)}"
                                    for k, v in set_env.items())
                 + " \\\n  " + shlex.join(argv) + "\n\n")
        lf.write("# equivalent stock form (see tools/vllm_serve.py for why the "
                 "shim is used)\n")
        lf.write("env " + " ".join(f"{k}={shlex.quote(v)}"
                                    for k, v in set_env.items())
                 + " \\\n  vllm " + shlex.join(argv[2:]) + "\n\n")
        lf.write("# env vars set explicitly for this run\n")
        lf.write(json.dumps(set_env, indent=1) + "\n\n")
        lf.write("# all VLLM_*/OMP_*/KMP_*/LD_PRELOAD vars in the server env\n")
        lf.write(json.dumps({k: v for k, v in sorted(env.items())
                             if k.startswith(("VLLM_", "OMP_", "KMP_"))
                             or k == "LD_PRELOAD"}, indent=1) + "\n\n")
        lf.write("# package versions (venv /opt/vllmcpu)\n")
        lf.write(json.dumps(vers, indent=1) + "\n\n")
        lf.write("# machine\n" + json.dumps(machine, indent=1) + "\n\n")
        lf.write(f"# model config ({MODEL}/config.json)\n")
        lf.write(open(os.path.join(MODEL, "config.json")).read() + "\n")
        lf.write("# load spec: see scenario.json (key 'load')\n")


def start_replica(name, port, sc, out, env, set_env, vers, machine):
    rdir = os.path.join(out, f"replica-{name}")
    os.makedirs(os.path.join(rdir, "metrics"))
    base = f"http://127.0.0.1:{port}"
    argv = [VENV_PY, os.path.join(HERE, "vllm_serve.py"), "serve", MODEL,
            "--host", "127.0.0.1", "--port", str(port)] + sc["server_args"]
    write_launch(os.path.join(rdir, "launch.txt"), set_env, env, argv, vers,
                 machine)
    log = open(os.path.join(rdir, "server.log"), "wb")
    meta = {"replica": name, "port": port, "launch_ts": time.time()}
    srv = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                           env=env, cwd="/tmp")
    meta["server_pid"] = srv.pid
    with open(os.path.join(rdir, "launch.txt"), "a") as lf:
        lf.write(f"\n# server PID {srv.pid}, launched at unix "
                 f"{meta['launch_ts']:.3f}\n")
    scr = subprocess.Popen(
        [VENV_PY, os.path.join(HERE, "scrape_metrics.py"), "--url",
         base + "/metrics", "--out-dir", os.path.join(rdir, "metrics"),
         "--interval", "1"], cwd="/tmp")
    meta["scraper_pid"] = scr.pid
    return {"name": name, "dir": rdir, "base": base, "srv": srv, "scr": scr,
            "log": log, "meta": meta}


def wait_ready(reps, timeout_s):
    deadline = time.time() + timeout_s
    pending = list(reps)
    while pending and time.time() < deadline:
        for r in list(pending):
            if r["srv"].poll() is not None:
                pending.remove(r)
            elif http_ok(r["base"] + "/health"):
                r["meta"]["ready_ts"] = time.time()
                pending.remove(r)
                print(f"[run_replicas] {r['name']} ready after "
                      f"{time.time() - r['meta']['launch_ts']:.1f}s",
                      flush=True)
        time.sleep(1)
    for r in reps:
        r["meta"]["ready"] = "ready_ts" in r["meta"]
    return all(r["meta"]["ready"] for r in reps)


def stop_replica(r):
    os.kill(r["scr"].pid, signal.SIGTERM)
    r["scr"].wait(timeout=30)
    meta, srv = r["meta"], r["srv"]
    meta["shutdown_ts"] = time.time()
    if srv.poll() is None:
        os.kill(srv.pid, signal.SIGTERM)
        try:
            srv.wait(timeout=90)
        except subprocess.TimeoutExpired:
            meta["sigkill"] = True
            os.kill(srv.pid, signal.SIGKILL)
            srv.wait()
    meta["server_exit_ts"] = time.time()
    meta["server_returncode"] = srv.returncode
    r["log"].close()
    json.dump(meta, open(os.path.join(r["dir"], "run_meta.json"), "w"),
              indent=1)
    print(f"[run_replicas] {r['name']} exited rc={srv.returncode}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sc = json.load(open(args.scenario))
    out = args.out
    if os.path.exists(out):
        sys.exit(f"{out} exists; remove it first")
    os.makedirs(out)
    shutil.copy(args.scenario, os.path.join(out, "scenario.json"))

    env = dict(os.environ)
    set_env = {"VLLM_LOGGING_LEVEL": "INFO", "PYTHONUNBUFFERED": "1",
               "VLLM_CACHE_ROOT": "/tmp/vllm-cache"}
    set_env.update(sc.get("env", {}))
    env.update(set_env)
    vers, machine = versions(), cpu_info()

    reps = [start_replica(name, port, sc, out, env, set_env, vers, machine)
            for name, port in sc["replicas"].items()]
    meta = {"scenario": os.path.basename(args.scenario),
            "replicas": {r["name"]: r["base"] for r in reps}}
    ready = wait_ready(reps, sc.get("ready_timeout_s", 400))
    meta["ready"] = ready
    if ready and sc.get("load"):
        time.sleep(sc.get("pre_idle_s", 5))
        spec_path = os.path.join("/tmp", f"spec-{os.getpid()}.json")
        json.dump(sc["load"], open(spec_path, "w"))
        meta["load_start_ts"] = time.time()
        cmd = [VENV_PY, os.path.join(HERE, "loadgen.py"), "--base-url",
               reps[0]["base"], "--spec", spec_path, "--out",
               os.path.join(out, "requests.jsonl")]
        for r in reps:
            cmd += ["--replica", f"{r['name']}={r['base']}"]
        with open(os.path.join(out, "client.log"), "wb") as cl:
            rc = subprocess.run(cmd, stdout=cl, stderr=subprocess.STDOUT,
                                cwd="/tmp").returncode
        meta["load_end_ts"] = time.time()
        meta["loadgen_rc"] = rc
        print(f"[run_replicas] load done rc={rc} in "
              f"{meta['load_end_ts'] - meta['load_start_ts']:.1f}s", flush=True)
        time.sleep(sc.get("post_idle_s", 15))
    for r in reps:
        stop_replica(r)
    meta["server_returncodes"] = {r["name"]: r["meta"]["server_returncode"]
                                  for r in reps}
    json.dump(meta, open(os.path.join(out, "run_meta.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
