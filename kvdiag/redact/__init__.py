"""`kvdiag redact`: a copy of an incident safe to share, with stable pseudonyms.

categories.toml says what is replaced (data, with samples and near misses); scrub.py replaces
it in text, in two passes; bundle.py walks an incident and writes the copy through
outputs.py; summary.py writes REDACTED.md; run.py is what the commands call.
"""
