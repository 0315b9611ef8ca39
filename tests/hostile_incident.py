"""A real incident with attacker-controlled text in log lines, label values and file names.

Built from the saturation fixture, so every report section that quotes input (evidence
excerpts, unmatched line shapes, input file names) carries a payload.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import FIXTURES

SOURCE = FIXTURES / "vllm-b-saturation" / "incident"

# Each repeated so its shape ranks among the unmatched templates the HTML lists.
LOG_PAYLOADS = (
    '<script>alert("log")</script>',
    "<img src=x onerror=alert(1)> `code` | pipe | @everyone #1 $x$ *em*",
    "WARNING [evil](javascript:alert(2)) </td></tr></table><svg onload=alert(3)>",
    "\x1b[31mRED\x1b[0m \x1b]0;title\x07 <b>bold</b> &lt;escaped&gt;",
)
LABEL_PAYLOAD = "</td><script>alert(4)</script><img src=x onerror=alert(5)>"
LOG_NAME = "server<svg onload=alert(6)>.log"
JUNK_NAME = '"><img src=x onerror=alert(7)>\x1b[31mred.txt'
# What must appear as literal text in the HTML and Markdown (a sample of the payloads).
VISIBLE = ('<script>alert("log")</script>', "<img src=x onerror=alert(1)>", LOG_NAME)


def build(target: Path) -> Path:
    """Write the hostile incident under target and return its folder."""
    folder = target / "hostile"
    (folder / "metrics").mkdir(parents=True)
    extra = "".join(f"{line}\n" for line in LOG_PAYLOADS for _ in range(300))
    (folder / LOG_NAME).write_bytes((SOURCE / "server.log").read_bytes() + extra.encode())
    for prom in (SOURCE / "metrics").glob("*.prom"):
        text = prom.read_bytes()
        (folder / "metrics" / prom.name).write_bytes(
            text.replace(b'model_name="/opt/tinymodel"', f'model_name="{LABEL_PAYLOAD}"'.encode())
        )
    shutil.copy(SOURCE / "metrics" / "scrapes.jsonl", folder / "metrics" / "scrapes.jsonl")
    (folder / JUNK_NAME).write_text("<script>alert(8)</script>\n", encoding="utf-8")
    return folder
