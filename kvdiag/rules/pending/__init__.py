"""Rules written and tested but not yet in the registry (kvdiag/rules/__init__.py).

Registering a rule adds a row to the `rules` list of every fixture's golden reports, so a
rule waits here until those goldens are regenerated together. To register one: move its
module up into kvdiag/rules/, add it to RULES, run `python -m tests.regen_goldens` and
review that the only change in existing goldens is the new rule's row.
"""
