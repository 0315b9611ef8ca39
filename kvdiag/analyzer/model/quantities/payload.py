"""Layer 2 arithmetic: what the allocated slots carry (domain.md §2, §3.2, §6).

Allocated slots are what the usage percentage counts; effective tokens are what the live
sequences hold. Static batching allocates every sequence at the batch's longest length;
paged pools round each sequence up to whole blocks (up to block_size - 1 empty slots).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvdiag.domain import kvmath


@dataclass(frozen=True, slots=True)
class Payload:
    effective: float  # tokens the sequences hold
    allocated: float  # slots the pool set aside for them

    @property
    def ratio(self) -> float:
        return self.effective / self.allocated if self.allocated else 0.0

    @property
    def empty(self) -> float:
        return self.allocated - self.effective


def static_batch(lengths: Sequence[int]) -> Payload:
    """Every sequence padded to the longest (oracle: 16 x 2,048 vs 5,888 -> 18 %)."""
    return Payload(float(sum(lengths)), float(len(lengths) * max(lengths, default=0)))


def paged(lengths: Sequence[float], block_size: int) -> Payload:
    """Each sequence rounded up to whole blocks (oracle: 1 token, block 16 -> 15 empty)."""
    allocated = sum(kvmath.blocks_for_tokens(n, block_size) * block_size for n in lengths)
    return Payload(float(sum(lengths)), float(allocated))


def prefix_recompute(shared_prefix: float, requests: float) -> float:
    """Tokens of a shared prefix held or prefilled once per request instead of once.

    Oracle (domain.md §6): a 5,000-token system prompt for 20 concurrent users claims
    100,000 tokens of KV at once; with prefix caching it is held once.
    """
    return shared_prefix * requests
