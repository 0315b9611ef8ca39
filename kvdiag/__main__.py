"""`python -m kvdiag` runs the CLI."""

from kvdiag.cli.main import main

main()
