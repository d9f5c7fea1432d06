"""Group-normalised advantages for GRPO.

Each task is rolled out K times; the K rollouts form a group. A rollout's advantage is its reward
standardised within its group (paper, "Objective"):

    A_k = (R_k - mean_g(R)) / (std_g(R) + eps)

`std_g` is the *population* standard deviation (``unbiased=False``, divide by K): it is the
statistic of the group itself rather than an estimate of a wider population, it is defined for
K = 1, and with it the advantages of a group have unit population variance (up to eps). A group
whose rewards are all equal (including a single-rollout group) carries no learning signal and gets
advantages of exactly 0, independent of floating-point rounding of its mean.

`scale` (`train.scale_rewards`, TRL's name and values) says what the centred rewards are divided by:
``group`` (the default and the paper's) its group's std as above; ``batch`` the std of every reward of the
update (the mean is still the group's; PPO Lite); ``none`` nothing, A_k = R_k - mean_g(R) (Dr. GRPO: dividing
by the std weighs tasks whose rollouts barely differ as much as any other).

Used by `rl.update.grpo_update`; pure and vectorised (no Python loop over groups).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

ScaleRewards = Literal["group", "batch", "none"]
"""What centred rewards are divided by (`train.scale_rewards`)."""


def group_advantages(
    rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, scale: ScaleRewards = "group"
) -> Tensor:
    """Centre rewards within groups and scale them (by the group's std by default).

    Args:
        rewards: ``[B]`` reward of each rollout (any real dtype).
        group_ids: ``[B]`` int64 group (task) id of each rollout; ids need not be contiguous.
        eps: added to the std before dividing.
        scale: ``group``, ``batch`` or ``none`` (see the module docstring).

    Returns:
        ``[B]`` advantages, floating dtype of ``rewards`` (default dtype for integer rewards).
    """
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    if rewards.numel() == 0:
        return torch.zeros_like(rewards, dtype=out_dtype)
    r = rewards.to(torch.float64)  # [B]; float64 so means of long groups stay exact enough
    _, inverse = torch.unique(group_ids, return_inverse=True)  # [B] in 0..G-1
    num_groups = int(inverse.max()) + 1
    zeros = r.new_zeros(num_groups)  # [G]

    count = zeros.index_add(0, inverse, torch.ones_like(r))  # [G]
    mean = zeros.index_add(0, inverse, r) / count  # [G]
    centered = r - mean[inverse]  # [B]
    std = (zeros.index_add(0, inverse, centered.square()) / count).sqrt()  # [G]

    r_max = zeros.scatter_reduce(0, inverse, r, reduce="amax", include_self=False)  # [G]
    r_min = zeros.scatter_reduce(0, inverse, r, reduce="amin", include_self=False)  # [G]
    flat = (r_max == r_min)[inverse]  # [B]

    if scale == "group":
        centered = centered / (std[inverse] + eps)
    elif scale == "batch":
        centered = centered / (r.std(correction=0) + eps)
    advantages = torch.where(flat, 0.0, centered)  # [B]
    return advantages.to(out_dtype)
