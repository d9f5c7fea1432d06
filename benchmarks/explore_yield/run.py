"""One round of the explore-yield benchmark: the evolution stages' own logic on its targets, no training.

`measure_round` runs, with the settings the stages read from the config, what `explore`, `triples`,
`abstract` and `verify` compute in a run's round: the teacher reflects on each target and explores
(`stages.explore.exploration.explore`), its calls are replayed into triples (`build_triples`), grouped and
abstracted into candidates (`build_groups`, `single_call_groups`, `abstract_groups`), and the candidates
verified (`verify_candidates`, against the config's held-out splits). Nothing is trained or stored: the
exploration rows (`links.exploration_row`) are the result.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from coevolve.benchmarks.explore_yield.links import candidate_verdicts, exploration_row
from coevolve.benchmarks.explore_yield.targets import Aim
from coevolve.config import CoevolveConfig
from coevolve.core import round_seed
from coevolve.envs.base import Environment, Task
from coevolve.stages.abstract.abstraction import abstract_groups, build_groups, single_call_groups
from coevolve.stages.explore.exploration import Target, exploration_artifacts, explore, explored_tasks
from coevolve.stages.explore.named_tool import signal_tool
from coevolve.stages.triples.grouping import build_triples
from coevolve.stages.verify.stage import settings_of
from coevolve.stages.verify.verification import exploration_lineage, sibling_duplicates, verify_candidates

RUN = "explore-yield"
"""The run name the benchmark's ids and seeds are derived from (nothing is stored under it)."""


def named_targets(aims: Sequence[Aim]) -> list[Target]:
    """The aims' targets, each with the tool its signal names as the explore stage gives it (`signal_tool`:
    an `unused` signal's tool; none for the control's)."""
    return [replace(aim.target, named_tool=signal_tool(aim.target.kind, aim.target.evidence)) for aim in aims]


def say(line: str) -> None:
    """A progress line on stderr, with the time."""
    print(f"{time.strftime('%H:%M:%S')} explore-yield {line}", file=sys.stderr, flush=True)


def measure_round(teacher: Any, policy: Any, config: CoevolveConfig, make_env: Callable[[], Environment],
                  aims: Sequence[Aim], *, round_: int = 0,
                  held_out: Sequence[Task] = ()) -> list[dict]:  # fmt: skip
    """Exploration rows of one round over `aims`. `policy` (engine,
    chat, version) makes verification's attempts; `held_out`: the tasks the contamination guard keeps out."""
    cfg, seed = config, config.run.seed
    targets = named_targets(aims)
    say(f"round {round_}: {len(targets)} explorations")
    explorations = explore(teacher, make_env, targets, rounds=cfg.explore.rounds, steps=cfg.explore.steps,
                           seed=round_seed(seed, round_, "explore"), follow_ups=cfg.explore.follow_ups,
                           named_tool_context=cfg.explore.named_tool_context,
                           prefill_named_tool=cfg.explore.prefill_named_tool,
                           prefill_arguments=cfg.explore.prefill_arguments,
                           prefill_listing_first=cfg.explore.prefill_listing_first,
                           prefill_listing_call=cfg.explore.prefill_listing_call)  # fmt: skip
    artifacts = exploration_artifacts(explorations, run=RUN, round_=round_, teacher=teacher.version)
    triples = build_triples(make_env, artifacts["explorations"], artifacts["steps"])
    say(f"round {round_}: {sum(t['ok'] for t in triples)} successful calls of {len(triples)}; abstracting")
    groups = build_groups(triples, explored_tasks(artifacts["explorations"]))
    if cfg.abstract.single_calls:
        groups += single_call_groups(groups)
    candidates = abstract_groups(
        teacher, make_env, groups, env=cfg.env.name, max_tasks=cfg.abstract.max_tasks_per_group,
        duplicate_jaccard=cfg.abstract.duplicate_jaccard, existing=[aim.target.task for aim in aims],
        seed=round_seed(seed, round_, "abstract"), samples=cfg.abstract.samples,
        prefill_effect=cfg.abstract.prefill_effect, prefill_question=cfg.abstract.prefill_question,
    )  # fmt: skip
    say(
        f"round {round_}: {sum(c['status'] == 'ok' for c in candidates)} ok candidates of {len(candidates)}; "
        "verifying"
    )
    settings = settings_of(SimpleNamespace(config=config), round_, "verify")
    verified = verify_candidates(policy, make_env, candidates, list(held_out),
                                 exploration_lineage(artifacts["explorations"]), settings, run=RUN, round_=round_)  # fmt: skip
    verdicts = candidate_verdicts(candidates, verified["verifications"], sibling_duplicates(candidates))
    steps_of: dict[str, list[dict]] = {}
    for step in artifacts["steps"]:
        steps_of.setdefault(step["trajectory_id"], []).append(step)
    rows = []
    for aim, target, x in zip(aims, targets, artifacts["explorations"], strict=True):
        steps = [s for tid in json.loads(x["trajectory_ids"]) for s in steps_of.get(tid, [])]
        mine = [c for c in candidates if c["exploration_id"] == x["exploration_id"]]
        named = target.named_tool is not None
        rows.append(exploration_row(aim, round_=round_, named=named, exploration=x, steps=steps, candidates=mine,
                                    verdicts=verdicts, admit=config.merge.admit))  # fmt: skip
    return rows
