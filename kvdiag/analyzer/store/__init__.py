"""The store: DuckDB tables, written only here, then checked once before facts and rules."""
