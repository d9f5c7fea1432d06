"""The OpenEnv adapter (`env.name: openenv`): environments written against OpenEnv run the CoEvolve loop.

`env.OpenEnvEnv` is the project's `Environment` over an OpenEnv environment named by import path (in this
process) or by its server's URL; `sessions` holds the two ways of talking to it, `tasks` the task file
format, `example_inventory` a small environment of our own, `toolworld_server` the built-in tool world as
an OpenEnv environment (docs/openenv.md). Needs the `openenv` extra.
"""
