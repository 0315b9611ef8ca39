"""`python -m kvdiag` runs the CLI."""

from kvdiag.analyzer.cli.main import main

main()
