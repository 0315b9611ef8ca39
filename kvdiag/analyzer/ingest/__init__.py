"""Ingesters: one per input kind (the list, in the order they are consulted, is in
registry.py). Importing a module of this package loads nothing else of it: the command
line's `--version` and `--help` must not pay for polars."""
