"""A discrete-event model of a continuous-batching scheduler (vLLM v1's, SGLang's alike).

Each step the scheduler walks the running requests in admission order: one decode token
each, or the next chunk of a prompt (chunked prefill), out of a per-step token budget.
KV blocks are allocated as tokens are computed; when none is free the request admitted
last is preempted (recompute: its blocks are freed, it goes back to the head of the queue
and will prefill its prompt and what it had generated again). Only in a step that
preempted nothing, waiting requests are admitted first-come first-served while the
budget, the sequence cap (`max_num_seqs`) and the free blocks allow. The step takes the
time the fitted step model gives for the tokens it computed. Time jumps over idle gaps:
no wall clock is involved, and steps of pure decode between two events are taken in one
stride.

A closed-loop client is replayed as such: a request recorded as sent right after another
finished (`Request.after`) is sent that long after the simulated finish, so a slower
configuration also slows the client, as it would have in the recording.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from kvdiag.domain.records.traffic import Request


@dataclass(frozen=True, slots=True)
class StepModel:
    """Seconds per scheduler step: an overhead, a cost per prefill token and per decode
    token, and one per KV token held (what attention reads grows with the contexts)."""

    overhead: float
    per_prefill_token: float
    per_decode_token: float
    per_held_token: float = 0.0

    def seconds(self, prefill: int, decode: int, held: int = 0) -> float:
        return (
            self.overhead
            + self.per_prefill_token * prefill
            + self.per_decode_token * decode
            + self.per_held_token * held
        )


@dataclass(frozen=True, slots=True)
class Engine:
    blocks: int  # usable KV blocks
    block_size: int
    max_num_seqs: int
    max_batched_tokens: int  # the per-step token budget
    step: StepModel
    max_waiting: int | None = None  # a queue cap (vLLM --max-num-queued-reqs): 503 past it


@dataclass(frozen=True, slots=True)
class Result:
    peak_usage: float  # ratio of used blocks, 0..1
    max_waiting: int
    max_running: int
    preemptions: int
    rejections: int
    queue_times: tuple[float, ...]  # per finished request: arrival -> first scheduled
    ttfts: tuple[float, ...]  # arrival -> first token
    finished: int
    seconds: float  # from the first arrival to the last finish
    longest_queue_s: float = 0.0  # the longest stretch with requests waiting: time to drain
    usage: tuple[tuple[float, float], ...] = ()  # (time, usage) at most once a second


@dataclass(slots=True)
class _Live:
    index: int
    arrival: float
    prompt: int
    output: int
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    cached: int = 0
    scheduled: float | None = None
    first_token: float | None = None


@dataclass(slots=True)
class _State:
    engine: Engine
    now: float = 0.0
    free: int = 0
    waiting: deque[_Live] = field(default_factory=deque)
    running: list[_Live] = field(default_factory=list)
    preemptions: int = 0
    rejections: int = 0
    peak_used: int = 0
    max_waiting: int = 0
    max_running: int = 0
    queue_times: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    finished: list[_Live] = field(default_factory=list)
    usage: list[tuple[float, float]] = field(default_factory=list)
    refused: list[_Live] = field(default_factory=list)  # ended without finishing
    queue_since: float | None = None  # when the current stretch of waiting began
    longest_queue: float = 0.0


def _blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def _preempt_last(s: _State) -> _Live:
    victim = s.running.pop()
    s.free += victim.blocks
    victim.blocks = 0
    victim.computed = 0
    s.waiting.appendleft(victim)
    s.preemptions += 1
    return victim


def _schedule_running(s: _State, budget: int) -> tuple[int, int, int, bool]:
    """One step's work for the running requests: (budget left, prefill tokens, decode
    tokens, whether anything was preempted)."""
    bs = s.engine.block_size
    prefill = decode = 0
    preempted = False
    i = 0
    while i < len(s.running) and budget > 0:
        r = s.running[i]
        todo = r.prompt + r.generated - r.computed
        n = min(todo, budget) if todo > 1 else 1
        need = _blocks_for(r.computed + n, bs) - r.blocks
        if need > s.free and s.running[-1] is r and i == 0:
            _refuse_alone(s, r)  # alone and still short: it can never fit this pool
            preempted = True
            break
        victim = None
        while need > s.free and victim is not r:
            victim = _preempt_last(s)
            preempted = True
        if victim is r:
            break  # r went back to the queue: those after it were preempted before it
        s.free -= need
        r.blocks += need
        r.computed += n
        budget -= n
        if todo > 1:
            prefill += n
        else:
            decode += 1
        i += 1
    return budget, prefill, decode, preempted


def _refuse_alone(s: _State, r: _Live) -> None:
    """A request that outgrows the whole pool by itself: the engine aborts it (vLLM checks
    max_model_len against the pool at start-up, so a real one does not get here)."""
    s.running.pop()
    s.free += r.blocks
    r.blocks = 0
    s.rejections += 1
    s.refused.append(r)


def _admit(s: _State, budget: int) -> tuple[int, int]:
    """Admit waiting requests first-come first-served: (budget left, prefill tokens)."""
    bs = s.engine.block_size
    prefill = 0
    while s.waiting and budget > 0 and len(s.running) < s.engine.max_num_seqs:
        r = s.waiting[0]
        if r.scheduled is None:
            r.computed = r.cached  # a prefix-cache hit: held, not computed
        n = min(r.prompt + r.generated - r.computed, budget)
        need = _blocks_for(r.computed + n, bs) - r.blocks
        if need > s.free:
            break
        s.waiting.popleft()
        s.free -= need
        r.blocks += need
        r.computed += n
        budget -= n
        prefill += n
        if r.scheduled is None:
            r.scheduled = s.now
            s.queue_times.append(s.now - r.arrival)
        s.running.append(r)
    return budget, prefill


def _produce(s: _State, end: float) -> list[_Live]:
    """Tokens come out for each running request whose prompt is in; the finished leave."""
    done = []
    still = []
    for r in s.running:
        if r.computed >= r.prompt + r.generated:
            r.generated += 1
            if r.first_token is None:
                r.first_token = end
                s.ttfts.append(end - r.arrival)
        if r.generated >= r.output:
            s.free += r.blocks
            r.blocks = 0
            done.append(r)
        else:
            still.append(r)
    s.running = still
    return done


def _decode_stride(s: _State, horizon: float) -> int:
    """How many pure-decode steps can be taken at once: every running request decoding,
    nobody waiting to be admitted, no block boundary crossed, no finish, before `horizon`."""
    if s.waiting or not s.running:
        return 1
    bs = s.engine.block_size
    steps = math.inf
    for r in s.running:
        if r.computed != r.prompt + r.generated - 1:
            return 1
        steps = min(steps, r.output - r.generated, r.blocks * bs - r.computed)
    per = s.engine.step.seconds(0, len(s.running), _held(s))
    if per > 0 and horizon < math.inf:
        steps = min(steps, max(1, int((horizon - s.now) / per)))
    return max(1, int(steps)) if steps < math.inf else 1


@dataclass(slots=True)
class _Arrivals:
    """Requests yet to arrive: a heap of (time, index); a closed loop's next request is
    pushed when the one it follows finishes."""

    requests: tuple[Request, ...]
    heap: list[tuple[float, int]] = field(default_factory=list)
    followers: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, r in enumerate(self.requests):
            if r.after is None:
                self.heap.append((r.arrival, i))
            else:
                self.followers.setdefault(r.after, []).append(i)
        heapq.heapify(self.heap)

    def next_time(self) -> float:
        return self.heap[0][0] if self.heap else math.inf

    def due(self, now: float) -> list[tuple[float, int]]:
        out = []
        while self.heap and self.heap[0][0] <= now:
            out.append(heapq.heappop(self.heap))
        return out

    def finished(self, index: int, when: float) -> None:
        for j in self.followers.pop(index, ()):
            heapq.heappush(self.heap, (when + self.requests[j].gap, j))


MAX_STEPS = 50_000_000  # a guard against a scheduler that makes no progress


def simulate(requests: tuple[Request, ...], engine: Engine) -> Result:
    """Replay the requests against the engine; the outcome the users would have seen."""
    s = _State(engine, free=engine.blocks)
    arrivals = _Arrivals(requests)
    start = arrivals.next_time()
    s.now = start if start < math.inf else 0.0
    next_sample = s.now
    for _ in range(MAX_STEPS):
        _arrive(s, arrivals)
        if not s.waiting and not s.running:
            if not arrivals.heap:
                break
            s.now = arrivals.next_time()
            continue
        done = _step(s, arrivals.next_time()) + s.refused
        s.refused.clear()
        for r in done:
            arrivals.finished(r.index, s.now)
        if s.now >= next_sample:
            s.usage.append((round(s.now - start, 3), _usage(s)))
            next_sample = s.now + 1.0
    return Result(
        peak_usage=s.peak_used / engine.blocks if engine.blocks else 0.0,
        max_waiting=s.max_waiting,
        max_running=s.max_running,
        preemptions=s.preemptions,
        rejections=s.rejections,
        queue_times=tuple(s.queue_times),
        ttfts=tuple(s.ttfts),
        finished=len(s.finished),
        seconds=s.now - start if start < math.inf else 0.0,
        usage=tuple(s.usage),
        longest_queue_s=round(s.longest_queue, 3),
    )


def _held(s: _State) -> int:
    """KV tokens the running requests hold (what a step's attention reads)."""
    return sum(r.computed for r in s.running)


def _usage(s: _State) -> float:
    return (s.engine.blocks - s.free) / s.engine.blocks if s.engine.blocks else 0.0


def _arrive(s: _State, arrivals: _Arrivals) -> None:
    cap = s.engine.max_waiting
    for when, i in arrivals.due(s.now):
        r = arrivals.requests[i]
        if cap is not None and len(s.waiting) + len(s.running) >= cap:
            s.rejections += 1
            arrivals.finished(i, when)  # the client moves on to its next request
            continue
        s.waiting.append(
            _Live(i, when, r.prompt, max(1, r.output), cached=min(r.cached, r.prompt - 1))
        )


def _step(s: _State, horizon: float) -> list[_Live]:
    """One scheduler step (or a stride of pure decode steps); returns the finished."""
    stride = _decode_stride(s, horizon)
    if stride > 1:
        for r in s.running:
            r.computed += stride - 1
            r.generated += stride - 1
        s.now += (stride - 1) * s.engine.step.seconds(0, len(s.running), _held(s))
    budget, prefill, decode, preempted = _schedule_running(s, s.engine.max_batched_tokens)
    admitted = 0
    if not preempted:
        budget, admitted = _admit(s, budget)
    if prefill + admitted + decode == 0:
        return _unblock(s)  # ended, not finished: its client moves on all the same
    s.peak_used = max(s.peak_used, s.engine.blocks - s.free)
    s.max_running = max(s.max_running, len(s.running))
    s.max_waiting = max(s.max_waiting, len(s.waiting))
    _track_queue(s)
    s.now += s.engine.step.seconds(prefill + admitted, decode, _held(s))
    done = _produce(s, s.now)
    s.finished += done
    return done


def _track_queue(s: _State) -> None:
    if s.waiting and s.queue_since is None:
        s.queue_since = s.now
    elif not s.waiting and s.queue_since is not None:
        s.longest_queue = max(s.longest_queue, s.now - s.queue_since)
        s.queue_since = None


def _unblock(s: _State) -> list[_Live]:
    """Nothing could run: the request at the head of the queue needs more blocks than the
    whole pool holds. The engine refuses it; so does the model."""
    if s.waiting and not s.running:
        s.rejections += 1
        return [s.waiting.popleft()]
    return []
