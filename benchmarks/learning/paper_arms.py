"""The paper's ablation arms on a paper config: its N and F, its teacher, its splits, from the base model.

A config at the paper's N and F (`dataset.bootstrap_tasks` = 100 and `evolve.every` = 10, as
configs/bfcl-qwen3-4b.yaml and configs/appworld-qwen3-4b.yaml are) runs the learning benchmark's arms as
the paper ran its ablations, not as they are scaled for the tool world: "+ synthetic data" with N = 100,
the F sweep at 2 and 40, the weaker explorer as the policy itself (on its own server when it is served);
every arm from the base model (no warm start), the evolving arms with the config's teacher, every arm
scored on the config's own evaluation splits. docs/reproduce.md maps each arm to the paper's row.

    coevolve bench learning --regime ablation --config configs/bfcl-qwen3-4b.yaml
"""

from __future__ import annotations

import functools
from pathlib import Path

from coevolve.config.paper import PAPER_F, PAPER_F_SWEEP, PAPER_N

PAPER_ARM_OVERRIDES: dict[str, tuple[str, ...]] = {
    "synthetic-data": ("evolve.every=0", f"dataset.bootstrap_tasks={PAPER_N}"),
    "weak-explorer": ("teacher.type=policy",),
    "evolve-often": (f"evolve.every={PAPER_F_SWEEP[0]}",),
    "evolve-rarely": (f"evolve.every={PAPER_F_SWEEP[1]}",),
}
"""The arms whose overrides differ on a paper config (the others' overrides are the same everywhere)."""


@functools.cache
def at_paper_setting(config: Path) -> bool:
    """Whether `config` sets the paper's N and F (then the paper's arms run on it)."""
    from coevolve.config import load_config

    loaded = load_config(config)
    return loaded.dataset.bootstrap_tasks == PAPER_N and loaded.evolve.every == PAPER_F
