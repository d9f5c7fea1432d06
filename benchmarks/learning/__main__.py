"""`python -m coevolve.benchmarks.learning`: the same as `coevolve bench learning`."""

from coevolve.benchmarks.learning.cli import main

main()
