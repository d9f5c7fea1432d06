"""`python -m coevolve.flows.cli ...` runs the `coevolve` command."""

from coevolve.flows.cli import main

main()
