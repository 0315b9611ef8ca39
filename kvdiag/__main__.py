"""`python -m kvdiag` runs the CLI."""

from kvdiag.analyzer.cli import main

main()
