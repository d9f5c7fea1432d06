"""`python -m coevolve.benchmarks NAME [ARGS...]`: the same as `coevolve bench NAME [ARGS...]`."""

import sys

from coevolve.benchmarks.suite import main

main(sys.argv[1:])
