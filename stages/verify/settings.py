"""Verification's settings, shared by its environment checks (`stages.verify.checks`) and its policy attempts
(`stages.verify.verification`); the verify stage builds them from the run config (`verify`, `rollout`)."""

from __future__ import annotations

from dataclasses import dataclass

from coevolve.agents.episodes import EpisodeLimits
from coevolve.llm.engine import SamplingParams


@dataclass(frozen=True)
class VerifySettings:
    attempts: int = 1
    """Policy attempts per candidate that passed the environment checks."""
    greedy: bool = True
    """Decode greedily when there is one attempt (sampling otherwise)."""
    temperature: float = 1.0
    max_new_tokens: int = 96
    limits: EpisodeLimits = EpisodeLimits()
    """Reply and context caps of an attempt's episode."""
    contamination_jaccard: float = 0.9
    """A candidate whose query is this similar to a held-out task's (or whose solution is the same) is
    contamination."""
    seed: int = 0
    verify: bool = True
    """False: the no-verification ablation (every parsed candidate admitted, no checks, no attempts)."""
    grounding: float = 0.5
    """Least share of the literals a query names that its solution must use or read."""
    judge: str = "execution"
    """Who decides the verdict after the checks: `execution` (the reference solution against the checker)
    or `policy` (the policy's attempts; config `verify.judge`)."""

    def sampling(self) -> SamplingParams:
        greedy = self.greedy and self.attempts == 1
        return SamplingParams(
            temperature=self.temperature, max_new_tokens=self.max_new_tokens, greedy=greedy, seed=self.seed
        )
