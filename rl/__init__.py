"""GRPO maths and the policy update.

- `rl.advantages`: group-normalised advantages.
- `rl.loss`: the clipped surrogate + k3 KL loss with token-level normalisation.
- `rl.logprobs`: per-token log-probs of sequences under a causal LM.
- `rl.batch`: `SampleBatch` (a round's training rows) and micro-batching.
- `rl.update`: `grpo_update`, one update of the policy on a round's rollouts.
- `rl.checkpoint`: atomic HF-layout checkpoints (full model or peft adapter) + optimizer state.

Nothing is imported here so that `import rl` stays cheap; import the submodules.
"""
