"""Sharded weights for a launched update: PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`).

`rl.trainer.load_train_state` shards the policy when its accelerate config says `distributed_type: FSDP`:
each process keeps 1/N of every parameter, gradient and AdamW moment, gathers a decoder layer's weights
just before that layer runs and frees them after. The update itself (`rl.update.grpo_update`) is the
data-parallel one, with two differences it reads off the model (`is_sharded`): the gradient reduction is
FSDP's (a reduce-scatter that averages; the update multiplies by the process count to get the sum, as the
data-parallel all-reduce does: gloo has no pre-scaled sum), and every process runs as many forward and
backward passes as the busiest one (a pass is a collective for every layer).

Checkpoints stay in the one-process layout: `full_state` gathers the weights and the optimizer state
(keyed by parameter index, as `torch.optim.Optimizer.state_dict` keys them) onto process 0, and
`load_full_optimizer_state` shards such a state again, so rounds can switch between sharded and
unsharded updates.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def shard_model(model: nn.Module, *, reshard_after_forward: bool = True) -> nn.Module:
    """Shard `model` in place over the default process group: one FSDP unit per decoder layer (the
    classes a transformers model lists in `_no_split_modules`) and one for the rest (embeddings, final
    norm, head). FSDP averages gradients over the processes."""
    from torch.distributed.fsdp import fully_shard

    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise ValueError(
            f"cannot shard {type(model).__name__}: it names no decoder layer classes (_no_split_modules)"
        )
    for layer in layers:
        fully_shard(layer, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    return model


def _parameter_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Names of the optimizer's parameters in the order `Optimizer.state_dict` numbers them."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole model state dict and optimizer state (index-keyed) on process 0, empty elsewhere.
    A collective: every process must call it."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    by_name = get_optimizer_state_dict(model, optimizer, options=options)
    if not weights:  # not process 0
        return {}, {}
    tied = {n for n, _ in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}
    weights = {name: tensor for name, tensor in weights.items() if name not in tied}  # as save_pretrained drops them
    index = {name: i for i, name in enumerate(_parameter_names(model, optimizer))}
    groups = [{**group, "params": [index[name] for name in group["params"]]} for group in by_name["param_groups"]]
    return weights, {"state": {index[name]: s for name, s in by_name["state"].items()}, "param_groups": groups}


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load an index-keyed optimizer state (`Optimizer.state_dict` layout, e.g. a one-process
    checkpoint's) into the optimizer of the sharded `model`; every process passes the whole state."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = _parameter_names(model, optimizer)
    if len(names) != sum(len(g["params"]) for g in state["param_groups"]):
        raise ValueError(
            f"optimizer state has {sum(len(g['params']) for g in state['param_groups'])} parameters, "
            f"the model trains {len(names)}"
        )
    by_name = {
        "state": {names[i]: s for i, s in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
    }
    from coevolve.rl.checkpoint import own_hyperparameters

    with own_hyperparameters(optimizer):  # the config's rate and decay, as `load_optimizer_state`
        set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))
