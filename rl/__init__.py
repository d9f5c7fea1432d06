"""GRPO maths and the policy update.

- `rl.advantages`: group-normalised advantages.
- `rl.loss`: the clipped surrogate + k3 KL loss with token-level normalisation.
- `rl.logprobs`: per-token log-probs of sequences under a causal LM.
- `rl.batch`: `SampleBatch` (a round's training rows) and micro-batching.
- `rl.update`: `grpo_update`, one update of the policy on a round's rollouts.
- `rl.hyperparams`: `UpdateHyperparams`, an update's settings, derived from the run config once.
- `rl.trainer`: `train_round`, the one update path a stage runs in one process or in N launched ones.
- `rl.checkpoint`: atomic HF-layout checkpoints (full model or peft adapter) + optimizer state.

Nothing is imported here so that `import rl` stays cheap; import the submodules.
"""
