"""Server logs (vLLM, SGLang): format packs as data, triage, vectorised parse, events."""
