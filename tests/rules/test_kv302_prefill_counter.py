"""KV302 names a prefill-bound queue from the prompt-token counter when the stats lines are
too few to show a plateau (a 27-s queue leaves two or three 10-s lines)."""

from __future__ import annotations

from tests.conftest import FIXTURES, analyze_json


def test_b2_queue_is_named_prefill_bound_from_the_counter() -> None:
    # The recording: prompt tokens 1,019 -> 35,498 in the 27 s of the queue (~1,230 tokens/s),
    # generation near 0; its three stats lines say 999.9, 1,142.1 and 1,211.9 tokens/s.
    _, doc = analyze_json(FIXTURES / "vllm-b2-saturation-larger-pool" / "incident")
    (kv302,) = [f for f in doc["findings"] if f["code"] == "KV302"]
    assert (
        "prefill-bound" in kv302["title"] and "counter scrapes on a straight line" in kv302["title"]
    )
    rate = next(e for e in kv302["evidence"] if e["what"] == "prompt_tokens_rate")
    assert 1000 <= rate["value"] <= 1300
    assert rate["path"].startswith("metrics/")
    actions = [r["action"] for r in kv302["remediation"]]
    assert any("--max-num-batched-tokens" in a for a in actions)


def test_a_queue_behind_a_sequence_cap_is_not_called_prefill_bound() -> None:
    # f: --max-num-seqs 2 pins running at 2 while 34 wait: the cap, not prefill.
    _, doc = analyze_json(FIXTURES / "vllm-f-admission-limited" / "incident")
    (kv302,) = [f for f in doc["findings"] if f["code"] == "KV302"]
    assert "prefill-bound" not in kv302["title"]
