"""Imports flow one way, with no cycle, and no product module grows past the size budget; the layer tables of
docs/architecture.md and README.md are this file's `LAYERS`, row for row.

Layers, lowest first (a module imports only from its own package or a lower layer). Each top-level folder
of the repository is one package of the namespace `coevolve` (`FOLDERS`: `flows/` is `coevolve.flows`):

    0  coevolve/     shared ids and types, the run config, the phases' contracts, child processes, file hashes
    1  storage/ envs/ llm/ rl/   (envs and rl may use llm: its tool-call parser, its chat template)
    2  agents/ ui/   policy, teacher, episode loop, ledger rows; the web view (reads storage only)
    3  executors/ stages/<phase>/ (but stage.py) pipeline/   where work runs; each phase's logic; the stage
                     contract, run context and runner (none of the three imports another)
    4  stages/round_plan.py, stages/<phase>/stage.py   each stage's declaration; the round plan
    5  flows/        the Prefect flow, opening a run (its context with warm starts and Ray environments wired
                     in), run resolution, fork, summaries
    6  benchmarks/   the benchmark suite
    7  cli/          the command line, over everything (`coevolve bench` included)

`stages/` holds two layers: a phase's logic (`coevolve.stages.*`, pure functions that import nothing of
`pipeline`) and its declaration (`stage.py`, the `StageDef` wiring that logic to the runner).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = {
    "coevolve": 0,
    "coevolve.storage": 1, "coevolve.envs": 1, "coevolve.llm": 1, "coevolve.rl": 1,
    "coevolve.agents": 2, "coevolve.ui": 2,
    "coevolve.executors": 3, "coevolve.stages.*": 3, "coevolve.pipeline": 3,
    "coevolve.stages": 4,
    "coevolve.flows": 5,
    "coevolve.benchmarks": 6,
    "coevolve.cli": 7,
}  # fmt: skip
SIDEWAYS = {("coevolve.envs", "coevolve.llm"), ("coevolve.rl", "coevolve.llm")}
"""Same-layer imports that are allowed: environments parse replies with llm's tool-call parser; a checkpoint
saves llm's chat template with its tokenizer."""
FOLDERS = {"coevolve": "coevolve", "agents": "coevolve.agents", "benchmarks": "coevolve.benchmarks",
           "cli": "coevolve.cli", "envs": "coevolve.envs",
           "executors": "coevolve.executors", "flows": "coevolve.flows", "llm": "coevolve.llm",
           "pipeline": "coevolve.pipeline", "rl": "coevolve.rl", "stages": "coevolve.stages",
           "storage": "coevolve.storage", "ui": "coevolve.ui"}  # fmt: skip
PHASE_LOGIC = ("stages", "coevolve.stages.*")
"""The second package of `stages/`: every module of a phase's folder but its `stage.py`."""
STAGE_WIRING = ("coevolve.stages.round_plan",)
"""The modules of `stages/` outside a phase's folder, on the declarations' layer."""
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            name = ".".join([package, *parts]).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path) -> set[str]:
    """Every coevolve module `path` imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {name for name in out if name.startswith("coevolve")}


def layer_of(module: str) -> tuple[str, int]:
    if module.startswith("coevolve.stages.") and module not in STAGE_WIRING and not module.endswith(".stage"):
        return "coevolve.stages.*", LAYERS["coevolve.stages.*"]
    for package, layer in sorted(LAYERS.items(), key=lambda item: -len(item[0])):
        if module == package or module.startswith(package + "."):
            return package, layer
    return "coevolve", 0


def test_imports_flow_one_way():
    wrong = []
    for name, path in modules().items():
        package, layer = layer_of(name)
        for target in imports(path):
            if target not in modules() and target not in LAYERS:
                continue  # `from package import name` of a function: the module edge is counted too
            other, other_layer = layer_of(target)
            if other != package and other_layer >= layer and (package, other) not in SIDEWAYS:
                wrong.append(f"{name} (layer {layer}) imports {target} (layer {other_layer})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    known = modules()
    graph = {name: {t for t in imports(path) if t in known and t != name} for name, path in known.items()}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*stack[stack.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_no_product_module_is_over_the_size_budget():
    too_long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


@pytest.mark.parametrize("document", ["docs/architecture.md", "README.md"])
def test_the_documented_layers_are_the_checked_ones(document):
    """Each layer table row `| layer | `folder/` | `import name` | ... |` is one entry of LAYERS and FOLDERS,
    and every package has its row: the pictures a newcomer reads cannot drift from what is enforced."""
    rows = re.findall(r"^\| (\d) \| `(\w+)/` \| `([\w.*]+)` \|", (REPO / document).read_text(), flags=re.MULTILINE)
    documented = {(folder, name, int(layer)) for layer, folder, name in rows}
    checked = {(folder, name, LAYERS[name]) for folder, name in [*FOLDERS.items(), PHASE_LOGIC]}
    assert documented == checked, (sorted(documented - checked), sorted(checked - documented))
