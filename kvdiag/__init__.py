"""kvdiag: forensic analyzer for LLM inference KV-cache incidents.

The command line is `kvdiag` (kvdiag/cli). The Python API, for notebooks and scripts, is
here: `kvdiag.analyze`, `compare`, `plan`, `redact`, `render`, `series_frames`, `query` and
`connect` (kvdiag/api.py, docs/python-api.md), loaded on first use so that `import kvdiag`
and `kvdiag --version` load neither polars nor DuckDB.
"""

import sys
import types
from typing import TYPE_CHECKING, Any

from kvdiag._allocator import limit_glibc_arenas, tune_polars_allocator

tune_polars_allocator()  # before anything imports polars
limit_glibc_arenas()  # before any thread starts

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kvdiag.api import analyze as analyze
    from kvdiag.api import compare as compare
    from kvdiag.api import connect as connect
    from kvdiag.api import plan as plan
    from kvdiag.api import query as query
    from kvdiag.api import redact as redact
    from kvdiag.api import render as render
    from kvdiag.api import series_frames as series_frames
    from kvdiag.domain.errors import InputError as InputError
    from kvdiag.domain.errors import KvdiagError as KvdiagError
    from kvdiag.domain.errors import NoInputError as NoInputError
    from kvdiag.domain.errors import NoSpaceError as NoSpaceError
    from kvdiag.domain.errors import NotPlannableError as NotPlannableError
    from kvdiag.domain.errors import PlanFlagError as PlanFlagError
    from kvdiag.domain.records.comparison import BeforeAfter as BeforeAfter
    from kvdiag.domain.records.diagnosis import Diagnosis as Diagnosis
    from kvdiag.domain.records.plan import Plan as Plan
    from kvdiag.reports import OutputFormat as OutputFormat

# name -> the module it comes from, imported when the name is first asked for
_LAZY = {
    **dict.fromkeys(
        (
            "analyze",
            "compare",
            "connect",
            "plan",
            "query",
            "redact",
            "render",
            "series_frames",
        ),
        "kvdiag.api",
    ),
    **dict.fromkeys(
        (
            "InputError",
            "KvdiagError",
            "NoInputError",
            "NoSpaceError",
            "NotPlannableError",
            "PlanFlagError",
        ),
        "kvdiag.domain.errors",
    ),
    "BeforeAfter": "kvdiag.domain.records.comparison",
    "Diagnosis": "kvdiag.domain.records.diagnosis",
    "Plan": "kvdiag.domain.records.plan",
    "OutputFormat": "kvdiag.reports",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use (PEP 562) and kept for the next."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvdiag' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    """kvdiag itself, guarding three of its API names.

    Importing a subpackage sets it as an attribute of its parent, so the first import of
    kvdiag.compare, kvdiag.plan or kvdiag.redact (by the functions of those names, or by
    anything else) would replace the function `kvdiag.compare` with the package. Those
    attributes are not set: the subpackages are reached as the code base reaches them,
    `from kvdiag.compare import compare_paths` (through sys.modules), never as attributes.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and name in ("compare", "plan", "redact"):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
