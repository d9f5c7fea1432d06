"""BFCL multi-turn data read from the installed `bfcl-eval` package: entries, answers, tool docs, splits.

Files are located with `importlib.resources` inside the package and read as JSON Lines (one object per
line). Tool docs use BFCL's type names ("dict", "float", "tuple", "any", ...), mapped to JSON schema with
the package's own `GORILLA_TO_OPENAPI` table. Every `Task` keeps the BFCL id in `lineage` (with the package
version) and carries the ground-truth call strings in its checker, so scoring needs no file access.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import json
import random
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.bfcl.parsing import Signatures, parse_call_string

DISTRIBUTION = "bfcl-eval"
CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
SPLITS = ("all", "ae-train", "ae-test", "train", "test")
AE_TRAIN_IDS = range(0, 100)


@functools.cache
def bfcl_version() -> str:
    """The installed bfcl-eval version (print it next to every BFCL number); read once per process."""
    return importlib.metadata.version(DISTRIBUTION)


def category_name(category: str) -> str:
    """`base` or `multi_turn_base` -> `multi_turn_base`; raises ValueError for anything else."""
    name = category if category.startswith("multi_turn_") else f"multi_turn_{category}"
    if name not in CATEGORIES:
        raise ValueError(
            f"category must be one of {[c.removeprefix('multi_turn_') for c in CATEGORIES]}, got {category!r}"
        )
    return name


def _read_jsonl(*parts: str) -> list[dict[str, Any]]:
    path = importlib.resources.files("bfcl_eval").joinpath("data", *parts)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_entries(category: str) -> list[dict[str, Any]]:
    """The questions of a category (`BFCL_v4_<category>.json`), in file order."""
    return _read_jsonl(f"BFCL_v4_{category_name(category)}.json")


def load_answers(category: str) -> dict[str, list[list[str]]]:
    """Ground-truth call strings per turn, by BFCL id."""
    rows = _read_jsonl("possible_answer", f"BFCL_v4_{category_name(category)}.json")
    return {row["id"]: row["ground_truth"] for row in rows}


def load_docs(class_name: str) -> list[dict[str, Any]]:
    """BFCL's function docs of one backend class (one function per line)."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    return _read_jsonl("multi_turn_func_doc", MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name])


def json_schema(node: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema with its type names mapped to JSON schema (recursively)."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    schema = {k: v for k, v in node.items() if k not in ("type", "items", "properties")}
    schema["type"] = GORILLA_TO_OPENAPI.get(node.get("type", "string"), "string")
    if "items" in node:
        schema["items"] = json_schema(node["items"])
    if "properties" in node:
        schema["properties"] = {key: json_schema(value) for key, value in node["properties"].items()}
    return schema


def tool_schema(doc: Mapping[str, Any]) -> dict[str, Any]:
    """One BFCL function doc as an OpenAI function-calling tool."""
    parameters = json_schema(doc.get("parameters", {"type": "dict", "properties": {}}))
    parameters["type"] = "object"
    return {
        "type": "function",
        "function": {"name": doc["name"], "description": doc["description"], "parameters": parameters},
    }


def param_types(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The documented JSON type of every parameter, by function name then parameter name."""
    return {
        doc["name"]: {
            key: json_schema(value)["type"] for key, value in doc["parameters"]["properties"].items()
        }
        for doc in docs
    }


def added_functions_message(schemas: list[dict[str, Any]]) -> str:
    """The user turn of a miss_func held-out turn: the new docs, then BFCL's fixed prompt."""
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    return json.dumps(schemas) + "\n" + DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def build_task(
    entry: dict[str, Any],
    truth: list[list[str]],
    category: str,
    signatures: Signatures,
    schemas: Mapping[str, dict[str, Any]],
) -> Task:
    """One `Task` from a BFCL entry and its ground truth; `schemas` holds every involved function's tool."""
    category = category_name(category)
    missed = {int(turn): list(names) for turn, names in (entry.get("missed_function") or {}).items()}
    turns = []
    for index, messages in enumerate(entry["question"]):
        if index in missed:
            turns.append(added_functions_message([schemas[name] for name in missed[index]]))
        else:
            turns.append("\n".join(m["content"] for m in messages if m.get("role") == "user"))
    initial_state = {
        "initial_config": entry.get("initial_config", {}),
        "involved_classes": list(entry["involved_classes"]),
        "long_context": category == "multi_turn_long_context",
        "missed_function": {str(turn): names for turn, names in missed.items()},
    }
    checker = {"bfcl_id": entry["id"], "category": category, "ground_truth": truth}
    solution = [[parse_call_string(call, signatures) for call in turn] for turn in truth]
    return Task(
        id=Task.make_id("bfcl", initial_state, turns, checker),
        env="bfcl",
        split="all",
        family="+".join(sorted(entry["involved_classes"])),
        initial_state=initial_state,
        turns=turns,
        solution=solution,
        checker=checker,
        source="benchmark",
        lineage={"bfcl_id": entry["id"], "bfcl_version": bfcl_version()},
    )


def numeric_id(task: Task) -> int:
    """The number at the end of the BFCL id (`multi_turn_base_17` -> 17)."""
    return int(task.lineage["bfcl_id"].rsplit("_", 1)[1])


def select_split(tasks: list[Task], split: str, seed: int) -> list[Task]:
    """The tasks of `split`, relabelled with its name.

    `ae-train` / `ae-test`: ids 0-99 / 100-199, AgentEvolver's unshuffled split. The file is ordered in
    domain blocks (0-49 file system, 50-99 vehicle, 100-149 trading, 150-199 travel), so this split is
    domain-disjoint: test measures transfer to unseen backends. `train` / `test`: stratified by the set of
    involved classes; each stratum is shuffled with `seed` and dealt alternately, so every stratum is split
    in half (odd strata differ by one) and the totals are 100 / 100.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    if split == "all":
        chosen = tasks
    elif split.startswith("ae-"):
        chosen = [t for t in tasks if (numeric_id(t) in AE_TRAIN_IDS) == (split == "ae-train")]
    else:
        chosen = _stratified_half(tasks, seed, first=split == "train")
    return [task.model_copy(update={"split": split}) for task in chosen]


def _stratified_half(tasks: list[Task], seed: int, *, first: bool) -> list[Task]:
    strata: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        strata[task.family].append(task)
    rng = random.Random(seed)
    dealt: list[Task] = []
    for family in sorted(strata):
        members = sorted(strata[family], key=numeric_id)
        rng.shuffle(members)
        dealt.extend(members)
    picked = {t.id for t in dealt[0 if first else 1 :: 2]}
    return [t for t in tasks if t.id in picked]


def solution_strings(solution: list[list[ToolCall]]) -> list[list[str]]:
    """Render calls as BFCL call strings with keyword arguments (what the official checker executes)."""
    return [[call_string(call) for call in turn] for turn in solution]


def call_string(call: ToolCall) -> str:
    """`name(a='x',b=1)`, as bfcl-eval's `convert_to_function_call` renders a decoded call."""
    return f"{call.name}({','.join(f'{k}={v!r}' for k, v in call.arguments.items())})"
