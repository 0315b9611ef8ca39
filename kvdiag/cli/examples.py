"""Bundled example incidents: real recorded runs a new user can analyse with no data."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

# name -> one line on what it shows
EXAMPLES: dict[str, str] = {
    "vllm-b-saturation": (
        "real vLLM 0.32 run: 36 long requests against a pool of 8,704 tokens "
        "(32 waiting, 29 preemptions, KV usage 1.0)"
    ),
    "vllm-b2-saturation-larger-pool": (
        "the same 36 requests after the fix, on a pool of 81,920 tokens (no preemption; a "
        "prefill-bound queue of 28 remains): `kvdiag compare example:vllm-b-saturation "
        "example:vllm-b2-saturation-larger-pool`"
    ),
}


def example_path(name: str) -> Path:
    """Where an example's incident folder is: inside the installed package, or the checkout."""
    if name not in EXAMPLES:
        raise KeyError(name)
    packaged = resources.files("kvdiag") / "examples" / name
    if packaged.is_dir():
        return Path(str(packaged))
    # Source checkout or editable install: the fixture the wheel copies from.
    checkout = Path(__file__).resolve().parents[2] / "fixtures" / name / "incident"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"example {name!r} is not shipped with this installation")
