"""`python -m coevolve.cli ...` runs the `coevolve` command."""

from coevolve.cli import main

main()
