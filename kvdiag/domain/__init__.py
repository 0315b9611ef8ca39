"""The domain's arithmetic, one home per quantity: KV bytes, pools, counters, quantiles.

Pure functions, no I/O and no store: ingesters, facts, rules and reports all call here."""
