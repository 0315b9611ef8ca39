"""A request of the incident's traffic, as the incident model reads it and the plan's
simulator replays it (seconds from the load's start, tokens)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    arrival: float  # seconds from the load's start, when `after` is None
    prompt: int
    output: int  # tokens it generates before it finishes
    cached: int = 0  # prompt tokens found in the prefix cache on its first admission
    after: int | None = None  # sent `gap` seconds after this request (index) finished
    gap: float = 0.0
