"""The OpenEnv adapter needs no gradio: openenv 0.10.0 lists it as a dependency (so the `openenv` extra brings
it: pyproject.toml says why it cannot leave it out), but imports it only for its web interface, behind a guard.
With gradio made unimportable, in a fresh interpreter, the adapter runs an episode in process and both of our
OpenEnv apps answer /health: what `pip install --no-deps openenv==0.10.0` users get (docs/openenv.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

SCRIPT = """
import sys
sys.modules["gradio"] = None  # as if it were not installed: `import gradio` raises ModuleNotFoundError
from fastapi.testclient import TestClient
from coevolve import envs
from coevolve.envs.openenv.example_inventory import create_inventory_app
from coevolve.envs.openenv.toolworld_server import create_toolworld_app
env = envs.make("openenv", environment="coevolve.envs.openenv.example_inventory:InventoryEnvironment")
task = env.tasks("train")[0]
env.reset(task)
(item, want), = task.initial_state["goal"].items()
have = task.initial_state["stock"][item]
name = "add_stock" if want > have else "remove_stock"
env.step([{"name": name, "arguments": {"item": item, "quantity": abs(want - have)}}])
print("reward", env.evaluate().reward)
for app in (create_inventory_app(), create_toolworld_app()):
    print("health", TestClient(app).get("/health").status_code)
print("gradio loaded", any(m.startswith("gradio") and sys.modules[m] is not None for m in sys.modules))
"""


def test_the_adapter_and_our_servers_run_without_gradio():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:4] == ["reward 1.0", "health 200", "health 200", "gradio loaded False"]
