"""What the logs of engines other than vLLM share: vLLM's machinery run with their own pack.

SGLang, TGI and TensorRT-LLM logs are read by `VllmLogIngester` with their own format pack
(line accounting, repairs, event tables). They are told apart by the engine's own logger
header, and a paste of the engine's messages without it (a fragment quoted in a ticket) is
recognised by its events.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from typing import ClassVar

from kvdiag.analyzer.ingest.logs.steps import pack_events
from kvdiag.analyzer.ingest.logs.vllm import VllmLogIngester


class EngineLogIngester(VllmLogIngester):
    """A log with its engine's own header (95); its messages without it are a quoted fragment."""

    quoted: ClassVar[int] = 65  # a fragment: under any log with its engine's header (90, 95)
    sniff_parses = True

    @classmethod
    @abstractmethod
    def header(cls) -> re.Pattern[str]:
        """The engine's own logger header: no other engine writes it."""

    @classmethod
    def quotes(cls, name: str, head: str) -> bool:
        return cls.sniff(name, head) == cls.quoted

    @classmethod
    def sniff_bound(cls, name: str, head: str) -> int:
        return 95 if cls.header().search(head) else cls.quoted

    @classmethod
    def sniff(cls, name: str, head: str) -> int:
        if cls.header().search(head):
            return 95
        return cls.quoted if pack_events(cls.pack_name, head) else 0
