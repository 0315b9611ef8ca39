"""What a redaction replaced: REDACTED.md inside the bundle, and the terminal's summary.

Both show counts and pseudonym ranges, never an original value: REDACTED.md travels with
the bundle.
"""

from __future__ import annotations

from collections import Counter

from kvdiag import __version__
from kvdiag.redact.bundle import Redaction
from kvdiag.redact.catalogue import catalogue

_MAX_FILES = 200  # per-file rows listed in REDACTED.md; the rest are summed in one line
_TERMINAL_FILES = 5  # the files with the most replacements, on the terminal

NOT_REMOVED = (
    "numbers, timestamps, durations, metric names and their numeric labels, engine messages, "
    "launch flags and their numeric values: the analysis needs them",
    "loopback and unspecified addresses (127.0.0.1, ::1, 0.0.0.0), `localhost`, and public "
    "sites everyone knows (huggingface.co, github.com, pypi.org, pytorch.org, nvidia.com, ...)",
    "a plain word that names a host or model only where its context says so (`host=worker`): "
    "elsewhere it stays, since it may be a word of the logs themselves",
    "GPU UUIDs, serial numbers and PCI bus ids in nvidia-smi output",
    "free text with no known shape: names of people or projects in comments, prompts pasted "
    "outside the fields kvdiag knows (`prompt`, `text`, `content`, `completion`, ...)",
)


def totals(redaction: Redaction) -> Counter[str]:
    out: Counter[str] = Counter()
    for per_file in redaction.names.counts.values():
        out.update(per_file)
    return out


def _category_rows(redaction: Redaction) -> list[str]:
    done = totals(redaction)
    rows = ["| category | replaced | distinct values | what |", "|---|---:|---:|---|"]
    for c in catalogue():
        if c.name in redaction.keep:
            rows.append(f"| {c.name} | kept, as asked | | {c.doc} |")
        else:
            distinct = redaction.names.distinct(c.name)
            rows.append(f"| {c.name} | {done[c.name]:,} | {distinct:,} | {c.doc} |")
    return rows


def _file_rows(redaction: Redaction) -> list[str]:
    names = [c.name for c in catalogue()]
    counts = redaction.names.counts
    touched = sorted(f for f, n in counts.items() if sum(n.values()))
    rows = ["| file | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for f in touched[:_MAX_FILES]:
        rows.append(f"| {f} | " + " | ".join(str(counts[f][n] or "") for n in names) + " |")
    if len(touched) > _MAX_FILES:
        rest: Counter[str] = Counter()
        for f in touched[_MAX_FILES:]:
            rest.update(counts[f])
        label = f"{len(touched) - _MAX_FILES:,} more files"
        rows.append(f"| {label} | " + " | ".join(str(rest[n] or "") for n in names) + " |")
    return rows


def _listed(redaction: Redaction, status: str) -> list[str]:
    return [
        f"- `{f.name}`" + (f": {f.why}" if f.why else "")
        for f in redaction.files
        if f.status == status
    ]


def redacted_md(redaction: Redaction) -> str:
    """REDACTED.md: for whoever receives the bundle."""
    lines = [
        f"# Redacted by kvdiag {__version__}",
        "",
        "This is a copy of an incident with identifying values replaced by pseudonyms (the "
        "folder's own name is not kept: it cannot be checked). "
        "The same value has the same pseudonym in every file (`ip-1` is one address "
        "everywhere), so replicas, hosts and requests can still be followed through the logs. "
        "Prompts become `[prompt-N, L chars]` and prompt token ids become zeros (their count "
        "stays). The key back to the original values stays with the owner; it is not in this "
        "bundle.",
        "",
        "## Replaced",
        "",
        *_category_rows(redaction),
        "",
        "## Per file",
        "",
        *(_file_rows(redaction) if totals(redaction) else ["Nothing was replaced."]),
    ]
    copied = _listed(redaction, "copied")
    if copied:
        lines += ["", "## Not understood by kvdiag", ""]
        lines += ["Copied after the generic categories above were applied:", "", *copied]
    withheld = _listed(redaction, "withheld")
    if withheld:
        lines += ["", "## Withheld", "", "Not in this bundle:", "", *withheld]
    lines += ["", "## Not removed", "", *(f"- {item}" for item in NOT_REMOVED), ""]
    return "\n".join(lines)


def _busiest(redaction: Redaction) -> list[str]:
    """The files with the most replacements, a line each."""
    counts = redaction.names.counts
    busiest = sorted(counts, key=lambda name: (-sum(counts[name].values()), name))
    out = [
        f"  {name}: " + ", ".join(f"{c} {n:,}" for c, n in sorted(counts[name].items()))
        for name in busiest[:_TERMINAL_FILES]
    ]
    if len(busiest) > _TERMINAL_FILES:
        out.append(f"  and {len(busiest) - _TERMINAL_FILES:,} more files (REDACTED.md lists them)")
    return out


def terminal_summary(redaction: Redaction) -> list[str]:
    """A few lines for stderr."""
    done = totals(redaction)
    parts = [f"{c.name} {done[c.name]:,}" for c in catalogue() if done[c.name]]
    files = len([f for f in redaction.files if f.status != "withheld"])
    out = [f"redacted {files:,} files: " + (", ".join(parts) if parts else "nothing replaced")]
    out += _busiest(redaction)
    if redaction.keep:
        out.append("kept as asked: " + ", ".join(sorted(redaction.keep)))
    copied = [f.name for f in redaction.files if f.status == "copied"]
    if copied:
        shown = ", ".join(copied[:5]) + (f" and {len(copied) - 5} more" if len(copied) > 5 else "")
        out.append(f"not understood, copied after generic redaction: {shown}")
    for f in redaction.files:
        if f.status == "withheld":
            out.append(f"withheld {f.name}: {f.why}")
    return out
