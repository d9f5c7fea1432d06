"""Where a round's time goes: a breakdown of one real `coevolve` flow run by kind of work.

    coevolve bench profile-round configs/toolworld-smollm2.yaml --rounds 1

Runs the real Prefect flow on a fresh run (the ephemeral Prefect API is started first and timed apart)
with timers wrapped around the code that does each kind of work, and prints a table of exclusive
seconds (a nested timer's time is not counted again in its parent):

    generation prefill / decode   model forwards inside `HfEngine.generate` (more than one new token per
                                  row / one new token per row); "generation other" is the rest of
                                  generate: sampling, batching, KV-cache bookkeeping
    environment steps             `reset` and `step` of the environment
    log-prob passes (old, ref)    `rl.update._fixed_logprobs`: the no-grad passes before the update
    update forward / backward     model forwards with grad on, `Tensor.backward`
    optimizer                     grad-norm clipping and `optimizer.step()`
    update other                  the rest of `grpo_update`: padding, the loss arithmetic
    checkpoint                    `save_checkpoint`
    storage                       Parquet writes and reads, manifests, the DuckDB catalog
    orchestration and other       everything else: Prefect tasks, tokenising, parsing, stage logic

`--set KEY=VALUE` overrides config values, e.g. `--set train.shared_prefix=false` for the plain path.
Then the same flow runs again (every stage cached). The seconds per kind of work, the round's wall time
and the cached re-run go to `benchmarks/results/profile-round.jsonl`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch
import transformers

from coevolve import (
    envs,  # noqa: E402
    llm,  # noqa: E402
    rl,  # noqa: E402
    storage,  # noqa: E402
)
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

ORDER = (
    "generation prefill", "generation decode", "generation other", "environment steps",
    "log-prob passes (old, ref)", "update forward", "update backward", "optimizer", "update other",
    "checkpoint", "storage", "orchestration and other",
)  # fmt: skip


class ExclusiveTimer:
    """Seconds per category, each span's nested spans subtracted from it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[Any]] = []  # [category, start, child seconds]

    def active(self, category: str) -> bool:
        return any(frame[0] == category for frame in self._stack)

    def run(self, category: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        frame = [category, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            return fn(*args, **kwargs)
        finally:
            self._stack.pop()
            spent = time.perf_counter() - frame[1]
            self.seconds[category] += spent - frame[2]
            self.calls[category] += 1
            if self._stack:
                self._stack[-1][2] += spent

    def wrap(self, owner: Any, name: str, category: str | Callable[..., str]) -> None:
        """Time ``owner.name`` under ``category`` (or ``category(*args, **kwargs)``, chosen per call)."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            chosen = category(*args, **kwargs) if callable(category) else category
            return self.run(chosen, original, *args, **kwargs)

        setattr(owner, name, timed)


def model_forward_category(timer: ExclusiveTimer) -> Callable[..., str]:
    def category(model: Any, *args: Any, input_ids: Any = None, **kwargs: Any) -> str:
        if torch.is_grad_enabled():
            return "update forward"
        if timer.active("log-prob passes (old, ref)"):
            return "log-prob passes (old, ref)"
        if timer.active("generation other"):
            return (
                "generation prefill"
                if input_ids is not None and input_ids.shape[1] > 1
                else "generation decode"
            )
        return "orchestration and other"

    return category


def instrument(timer: ExclusiveTimer) -> None:
    from coevolve import flows  # noqa: E402

    for model_class in (transformers.LlamaForCausalLM, transformers.Qwen2ForCausalLM):
        timer.wrap(model_class, "forward", model_forward_category(timer))
    timer.wrap(llm.hf_engine.HfEngine, "generate", "generation other")
    for env_class in (envs.toolworld.env.ToolWorldEnv, envs.bfcl.env.BfclEnv):
        timer.wrap(env_class, "reset", "environment steps")
        timer.wrap(env_class, "step", "environment steps")
    timer.wrap(rl.update, "_fixed_logprobs", "log-prob passes (old, ref)")
    timer.wrap(rl.update, "grpo_update", "update other")
    timer.wrap(torch.Tensor, "backward", "update backward")
    timer.wrap(rl.update, "_optimizer_step", "optimizer")
    timer.wrap(rl.checkpoint, "save_checkpoint", "checkpoint")
    for owner, name in (
        (storage.store.RunStore, "write"), (storage.store.RunStore, "read"),
        (storage.store.RunStore, "write_manifest"), (flows.coevolve, "build_catalog"),
        (flows.coevolve, "write_text_atomic"),
    ):  # fmt: skip
        timer.wrap(owner, name, "storage")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("profile-round", __doc__)
    parser.add_argument("config")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", help="also write the table as JSON here")
    parser.add_argument(
        "--no-prompt-sharing",
        action="store_true",
        help="the engine prefills every copy of a repeated prompt (the old behaviour)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["COEVOLVE_HOME"] = tempfile.mkdtemp(prefix="coevolve-profile-")
    from prefect import flow

    from coevolve import flows  # noqa: E402

    started = time.perf_counter()
    flow(lambda: None, name="warm-up")()  # starts the ephemeral Prefect API
    prefect_start = time.perf_counter() - started

    timer = ExclusiveTimer()
    instrument(timer)
    engines = []  # every engine the run creates, to read its prefill counter
    init = llm.hf_engine.HfEngine.__init__

    def register(self, *a, **k):
        init(self, *a, **({**k, "share_prompts": False} if args.no_prompt_sharing else k))
        engines.append(self)

    llm.hf_engine.HfEngine.__init__ = register
    started = time.perf_counter()
    timer.run("orchestration and other", flows.coevolve.coevolve, args.config, run="profile", rounds=args.rounds,
              overrides=args.overrides)  # fmt: skip
    wall = time.perf_counter() - started
    prefill = sum(e.prefill_tokens for e in engines)
    print(f"\nconfig {args.config} {' '.join(args.overrides)}: {args.rounds} round(s), {wall:.1f} s "
          f"(Prefect API start before it: {prefect_start:.1f} s), prefill tokens {prefill:,}")  # fmt: skip
    print(f"{'kind of work':<28} {'seconds':>8} {'share':>6} {'calls':>7}")
    for name in ORDER:
        print(
            f"{name:<28} {timer.seconds[name]:>8.1f} {timer.seconds[name] / wall:>6.1%} {timer.calls[name]:>7}"
        )
    started = time.perf_counter()
    again = flows.coevolve.coevolve(args.config, run="profile", rounds=args.rounds, overrides=args.overrides)
    cached_s = time.perf_counter() - started
    recomputed = sum(state == "computed" for r in again["rounds"] for state in r.values())
    print(f"the same flow again (every stage cached): {cached_s:.2f} s, {recomputed} stages recomputed")
    figures = {"round wall": figure(wall, "s"), **{name: figure(timer.seconds[name], "s") for name in ORDER},
               "prefill tokens": figure(prefill, "tokens"), "cached re-run": figure(cached_s, "s"),
               "stages recomputed on the re-run": figure(recomputed, "")}  # fmt: skip
    record_result("profile-round", figures, command=command_line("profile-round", argv),
                  variant="no prompt sharing" if args.no_prompt_sharing else "")  # fmt: skip
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"wall": wall, "prefect_start": prefect_start, "seconds": dict(timer.seconds), "prefill": prefill,
                       "overrides": args.overrides}, out, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
