"""Reading: one incident's files into the incident model, in the order the data flows.

    schema/      the store's tables declared as data, the metric aliases, the field types
    text/        line reading that ingest, discovery, the store and redact share
    discovery/   find the inputs (folders, archives) and tell by content what each is
    ingest/      read each input into tables with provenance, by source: logs/, metrics/,
                 gpu/, config/ (flags, config.json)
    store/       DuckDB, written only here (it knows nothing of ingest); then the numbers
                 checked once (validate, timeline)
    model/       the incident model: the facts (each with its source), the quantities the
                 rules and the commands share (quantities/), and `Incident`, the one object
                 judgement and every command read (incident.py)
    live/        live sources: a Prometheus HTTP API, a running server (collect)

kvdiag/pipeline.py runs these steps, then the rules (kvdiag/rules/); the records they hand
on (the diagnosis, a comparison, a plan) are on the ground, kvdiag/domain/records/.
"""
