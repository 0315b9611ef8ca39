"""The engine: discover -> ingest -> store (DuckDB) -> rules -> diagnosis; and the CLI."""
