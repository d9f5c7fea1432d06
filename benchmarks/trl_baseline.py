"""Time one optimizer step of TRL's real `trl.GRPOTrainer` on a fixed set of already-generated samples.

The point is a like-for-like throughput baseline for our own GRPO update (`rl.update.grpo_update`): same
model, same prompt/completion token ids, same rewards, same micro-batch size, and TRL's own code for
everything after generation.

How TRL is driven (trl 1.16):

- Generation is replaced through TRL's public `rollout_func` hook (`GRPOTrainer(..., rollout_func=...)`):
  `GRPOTrainer._generate` calls it instead of sampling and takes its `prompt_ids`/`completion_ids` as the
  rollout. Our function hands back the fixed samples (`logprobs=None`, no sampling log-probs) plus
  `env_mask`, TRL's per-completion-token mask of model (1) vs environment/tool (0) tokens, which TRL turns
  into its `tool_mask` and multiplies into the loss mask, so tool-output tokens inside a completion are
  excluded from the loss exactly like in our update (they are still part of the forward context).
- Everything else is TRL's own `_generate_and_score_completions` / `_prepare_inputs` / `_compute_loss`:
  left-padding prompts, right-padding completions, the reference-model log-prob pass (with ``beta > 0``
  TRL builds its reference model itself, reloading the policy's checkpoint from disk), the reward
  function call and TRL's group normalisation of the rewards into advantages
  ``(r - mean_g) / (std_g + 1e-4)`` (TRL's ``std_g`` has Bessel's correction, ours divides by K), the
  shuffle and split of the batch into micro-batches, forward/backward per micro-batch with the "dapo"
  token-normalised loss, grad-norm clipping and the optimizer step.
- The reward function is not a dummy: it returns our fixed per-sample rewards, which the rollout passes
  along as an extra field, so that the advantages come from TRL's own normalisation.
- Old log-probs: with one optimizer step per generated batch (``num_iterations=1``,
  ``steps_per_generation == gradient_accumulation_steps``) the real trainer does *not* run an old-policy
  log-prob pass; it uses ``per_token_logps.detach()`` instead. This is TRL's normal behaviour in this
  setting and is kept (our update does run that extra no-grad pass).

Configuration differences from GRPOConfig's defaults, chosen to match our update on CPU: activation
(gradient) checkpointing off (TRL defaults it on), ``optim="adamw_torch"`` (plain `torch.optim.AdamW`, as
`rl.update.make_optimizer`; transformers would pick the fused AdamW), constant learning rate, no bf16.

CPU caveat: TRL computes log-probs through its fused, vocabulary-chunked LM head
(`trl.kernels.chunked_logprob`). Without Triton (CPU) it scores *every* position of each sequence, prompt
included, and discards the prompt positions afterwards; only on CUDA/XPU with Triton does it project just
the completion positions. With long prompts and short completions that LM-head work dominates on CPU.

Timing: a `TrainerCallback` stamps `on_step_begin` and `on_step_end` of the timed optimizer step. That span
covers the rollout hook (a list lookup), TRL's padding, reference log-probs, rewards and advantages, all
micro-batch forward/backward passes (TRL's training forward also computes per-token entropies),
clipping, `optimizer.step()` and `zero_grad`. Trainer construction, the reference-model load and the
dataloader fetch before the step are not included.

Side effects: the given model is trained in place (``warmup + 1`` optimizer steps). TRL's forward patch
(`add_fused_lm_head`) is removed and the model's train/eval mode restored afterwards; TRL also writes the
tokenizer's pad id into ``model.config`` / ``model.generation_config``.

    coevolve bench trl-baseline                             # tiny-random-llama, 2 groups x 8 samples
    coevolve bench trl-baseline --model smollm2-135m

The step's seconds and policy tokens/s go to `benchmarks/results/trl-baseline.jsonl`;
`coevolve bench update-throughput` runs the same step next to ours.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

TRL_MISSING = "this benchmark runs TRL's GRPOTrainer, an optional extra: pip install 'coevolve[trl]'"


def require_trl() -> None:
    """Exit with one line naming the extra when TRL (or its `datasets`) is not installed."""
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit(f"error: {TRL_MISSING}") from None


def trl_update_seconds(
    model,
    tokenizer,
    samples,
    *,
    beta: float,
    temperature: float,
    lr: float,
    micro_batch_size: int,
    warmup: int = 0,
) -> dict:
    """Time one optimizer step of `trl.GRPOTrainer` on ``samples`` (see the module docstring).

    ``samples``: dicts with ``prompt_ids``, ``completion_ids``, ``completion_mask`` (1 policy token, 0
    tool-output token; passed to TRL as ``env_mask``), ``reward`` and ``group``; the K samples of a group
    are consecutive and share a prompt. One optimizer step covers all samples, in micro-batches of
    ``micro_batch_size`` sequences (the number of samples must be a multiple of it). ``warmup`` untimed
    optimizer steps on the same samples run first.

    Returns ``seconds`` (the timed step), ``policy_tokens`` (completion tokens with mask 1),
    ``tokens_per_second``, ``sequences`` and ``notes``.
    """
    require_trl()
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    groups, k = _groups(samples)
    n = len(samples)
    if micro_batch_size < 1 or n % micro_batch_size:
        raise ValueError(f"{n} samples are not a whole number of micro-batches of {micro_batch_size}")

    # One dataset row per group; TRL's sampler repeats each row K times. The prompt text is only a label
    # (TRL logs it and passes it to the rollout hook); the token ids trained on are the fixed ones.
    labels = {f"[group {g}] {tokenizer.decode(rows[0]['prompt_ids'])}": g for g, rows in groups.items()}
    dataset = Dataset.from_dict({"prompt": list(labels)})

    def fixed_rollout(prompts: list, trainer: Any) -> dict[str, list]:
        taken = {g: 0 for g in groups}
        picked = []
        for prompt in prompts:
            g = labels[prompt]
            picked.append(groups[g][taken[g]])
            taken[g] += 1
        return {
            "prompt_ids": [list(s["prompt_ids"]) for s in picked],
            "completion_ids": [list(s["completion_ids"]) for s in picked],
            "logprobs": None,
            "env_mask": [list(s["completion_mask"]) for s in picked],
            "fixed_reward": [float(s["reward"]) for s in picked],
        }

    def fixed_reward(
        prompts: list, completions: list, fixed_reward: list[float], **kwargs: Any
    ) -> list[float]:
        """Our precomputed reward of each sample (forwarded by `fixed_rollout`)."""
        return list(fixed_reward)

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self._start)

    timer = StepTimer()
    was_training = model.training
    patched_before = "forward" in vars(model)
    with tempfile.TemporaryDirectory(prefix="trl-baseline-") as out:
        config = GRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            fp16=False,
            per_device_train_batch_size=micro_batch_size,
            gradient_accumulation_steps=n // micro_batch_size,
            num_generations=k,
            num_iterations=1,
            beta=beta,
            temperature=temperature,
            learning_rate=lr,
            lr_scheduler_type="constant",
            optim="adamw_torch",
            weight_decay=0.0,
            max_grad_norm=1.0,
            loss_type="dapo",
            scale_rewards="group",
            mask_truncated_completions=False,
            activation_checkpointing=False,  # the new name of gradient_checkpointing (TRL defaults it on)
            use_vllm=False,
            use_liger_kernel=False,
            max_steps=warmup + 1,
            logging_steps=1_000_000,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            log_completions=False,
            seed=0,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=fixed_reward,
                args=config,
                train_dataset=dataset,
                processing_class=tokenizer,
                rollout_func=fixed_rollout,
                callbacks=[timer],
            )
        try:
            trainer.train()
        finally:
            if not patched_before and "forward" in vars(model):
                del model.forward  # undo TRL's add_fused_lm_head instance patch
            model.train(was_training)
            del trainer

    if len(timer.seconds) != warmup + 1:
        raise RuntimeError(f"expected {warmup + 1} optimizer steps, TRL ran {len(timer.seconds)}")
    seconds = timer.seconds[-1]
    policy_tokens = sum(sum(s["completion_mask"]) for s in samples)
    notes = (
        f"trl.GRPOTrainer, fixed samples via rollout_func; {len(groups)} groups x {k}, "
        f"{n // micro_batch_size} micro-batches of {micro_batch_size}; tool tokens masked via env_mask; "
        f"{'reference log-prob pass included (beta>0)' if beta > 0 else 'beta=0: no reference model'}; "
        "no old log-prob pass (TRL skips it when on-policy, uses detach()); "
        "batch padded to the longest prompt/completion before the micro-batch split; "
        "activation checkpointing off, optim adamw_torch; on CPU TRL's chunked LM head scores every "
        "position, prompt included (only Triton devices score just the completion)"
        + (f"; timed step {warmup + 1} after {warmup} untimed" if warmup else "")
    )
    return {
        "seconds": seconds,
        "policy_tokens": policy_tokens,
        "tokens_per_second": policy_tokens / seconds if seconds > 0 else float("inf"),
        "sequences": n,
        "notes": notes,
    }


def _groups(samples: list[dict]) -> tuple[dict[int, list[dict]], int]:
    """Samples by group id (in order), and the common group size K; checks the layout TRL needs."""
    if not samples:
        raise ValueError("no samples")
    groups: dict[int, list[dict]] = {}
    order = []
    for s in samples:
        g = s["group"]
        if g not in groups:
            groups[g] = []
            order.append(g)
        elif order[-1] != g:
            raise ValueError(f"samples of group {g} are not consecutive")
        groups[g].append(s)
        if len(s["completion_mask"]) != len(s["completion_ids"]):
            raise ValueError(f"group {g}: completion_mask and completion_ids differ in length")
    sizes = {len(rows) for rows in groups.values()}
    if len(sizes) != 1:
        raise ValueError(f"groups have different sizes {sorted(sizes)}; TRL needs K samples per group")
    for g, rows in groups.items():
        if any(r["prompt_ids"] != rows[0]["prompt_ids"] for r in rows):
            raise ValueError(f"samples of group {g} do not share a prompt")
    return groups, sizes.pop()


_SYSTEM = (
    "You are a careful assistant that can call tools. Available tools: search_flights(origin: str, "
    "destination: str, date: str) returns a list of flights with prices and times; book_flight(flight_id: "
    "str, passenger: str) books a seat and returns a confirmation code; get_weather(city: str, date: str) "
    "returns a forecast; convert_currency(amount: float, source: str, target: str) converts money at "
    "today's rate. Call a tool by writing a JSON object with the keys name and arguments on its own line, "
    "then wait for its result. Never invent tool results. When you have enough information, answer the "
    "user concisely, quoting prices in the user's currency, and mention any assumption you made. If a "
    "tool fails, explain the failure and try a reasonable alternative once before giving up. Keep your "
    "reasoning short and do not repeat the tool descriptions back to the user."
)
_USERS = (
    "I need to fly from Lisbon to Oslo next Friday, as cheap as possible, arriving before 6 pm. What "
    "are my options, what will the weather be like when I land, and how much is that in Norwegian krone? "
    "Please book the cheapest one for Ana Silva if it arrives in time.",
    "Find me a morning flight from Toronto to Chicago on the 14th, compare the two cheapest options in "
    "euros, check whether it will rain in Chicago that afternoon, and book the earlier one for Sam Lee "
    "unless it costs more than 300 euros.",
)


def synthetic_samples(
    tokenizer,
    *,
    groups: int = 2,
    per_group: int = 8,
    prompt_tokens: int = 340,
    completion_tokens: int = 40,
    tool_span: tuple[int, int] = (20, 30),
    vocab_size: int | None = None,
    seed: int = 0,
) -> list[dict]:
    """Fixed samples: chat-templated tool-use prompts cut to ``prompt_tokens`` tokens and random
    completions whose positions ``tool_span`` (half-open) are a tool output (mask 0), with 0/1 rewards."""
    rng = random.Random(seed)
    vocab = vocab_size or len(tokenizer)
    special = set(tokenizer.all_special_ids)
    samples = []
    for g in range(groups):
        messages = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _USERS[g % len(_USERS)]},
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        while len(ids) < prompt_tokens:  # pad out with more of the system text
            ids = tokenizer(_SYSTEM, add_special_tokens=False)["input_ids"] + ids
        prompt = ids[-prompt_tokens:]
        rewards = [1.0 if j % 3 == 0 else 0.0 for j in range(per_group)]
        rng.shuffle(rewards)
        for j in range(per_group):
            completion = []
            while len(completion) < completion_tokens:
                t = rng.randrange(vocab)
                if t not in special:
                    completion.append(t)
            mask = [0 if tool_span[0] <= i < tool_span[1] else 1 for i in range(completion_tokens)]
            samples.append(
                {
                    "prompt_ids": prompt,
                    "completion_ids": completion,
                    "completion_mask": mask,
                    "reward": rewards[j],
                    "group": g,
                }
            )
    return samples


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("trl-baseline", __doc__)
    parser.add_argument("--model", default="tiny-random-llama", help="tiny-random-llama or smollm2-135m")
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--warmup", type=int, default=0)
    args = parser.parse_args(argv)
    require_trl()  # before loading the model

    from coevolve.llm.models import load_model

    model, tokenizer = load_model(args.model)
    samples = synthetic_samples(tokenizer, vocab_size=min(len(tokenizer), model.config.vocab_size))
    name, weight = next((n, p) for n, p in model.named_parameters() if p.requires_grad and p.dim() == 2)
    before = weight.detach().clone()
    result = trl_update_seconds(
        model,
        tokenizer,
        samples,
        beta=args.beta,
        temperature=args.temperature,
        lr=args.lr,
        micro_batch_size=args.micro_batch_size,
        warmup=args.warmup,
    )
    changed = (weight.detach() - before).abs().max().item()
    print(json.dumps({**result, "model": args.model, "max_abs_change": {name: changed}}, indent=2))
    if changed == 0.0:
        raise SystemExit(f"{name} did not change: the optimizer step did not update the model")
    record_result("trl-baseline", {"step": figure(result["seconds"], "s"),
                                   "policy tokens": figure(result["tokens_per_second"], "tokens/s")},
                  command=command_line("trl-baseline", argv), variant=args.model)  # fmt: skip


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
