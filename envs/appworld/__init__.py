"""AppWorld as a CoEvolve environment: `envs.make("appworld")`, a client of `appworld serve environment`.

AppWorld itself is never imported here: it lives in its own venv (its pins clash with ours) behind HTTP on
loopback. Modules: `client` (HTTP, errors with fixes), `actions` (code out of a reply), `tasks` (task ids,
`Task` rows, the execute tool, TGC / SGC), `checker` (a synthesized task's checker), `env` (`AppWorldEnv`).
"""

from coevolve.envs.appworld.client import AppWorldError
from coevolve.envs.appworld.env import AppWorldEnv
from coevolve.envs.appworld.tasks import scenario_goal_completion, task_goal_completion

__all__ = ["AppWorldEnv", "AppWorldError", "scenario_goal_completion", "task_goal_completion"]
