"""One analysis, in the order its data flows (pipeline.py runs the steps):

    cli/         the command line: options and output policy only
    discovery/   find the inputs (folders, archives) and tell by content what each is
    ingest/      read each input into tables with provenance, by source: logs/, metrics/,
                 gpu/, config/ (flags, config.json), text/ (the line reading they share)
    schema/      the store's tables, declared as data
    store/       DuckDB, written only here; then the numbers checked once (validate, timeline)
    facts/       the incident's key numbers, each with its source
    verdict/     run the rules (kvdiag.rules), classify, reconcile the three layers, the fleet
    live/        live sources: a Prometheus HTTP API, a running server (collect)

The diagnosis record (diagnosis.py) is what every report renders (kvdiag.reports); the
domain's arithmetic (bytes per token, pools, counters, quantiles) is in kvdiag.domain.
"""
