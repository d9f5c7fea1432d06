"""Benchmarks: each measures one thing the project promises (learning, speed, memory, cost) on real code.

    coevolve bench list                      # the benchmarks (`benchmarks.suite`)
    coevolve bench NAME [ARGS...]            # run one: it appends its figures to benchmarks/results/NAME.jsonl
    coevolve bench report                    # benchmarks/RESULTS.md: the current figure of each

Results are data (`benchmarks.record`): one row per run with its commit, date, machine, command and named
figures. The dated account of the experiments behind them is in `docs/experiments/`.
"""
