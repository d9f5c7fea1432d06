"""Issue 39, items 5 and 6. A run whose output goes to a file or a pipe says what it is doing: a plain line
when each stage starts and ends, a few per long progress, no escape codes, no library deprecation notices.
Only a run's newest two checkpoints keep the optimizer state (twice the weights' size), so the newest update
computed again continues exactly; the older ones keep their weights, which still load and check against
their manifests, and an update that continues from one of them starts its optimizer fresh and says so."""

from __future__ import annotations

import re
import warnings

import pytest
from typer.testing import CliRunner

from coevolve import file_hashes
from coevolve.cli import app
from coevolve.cli.support import quiet_libraries
from coevolve.config import load_config
from coevolve.flows.coevolve import save_resolved_config
from coevolve.flows.compare import changed_files
from coevolve.flows.run_context import open_run
from coevolve.pipeline import context as context_module
from coevolve.pipeline.context import PlainProgress, RunContext
from coevolve.pipeline.runner import is_cached, run_stage, stage_key
from coevolve.rl.checkpoint import OPTIMIZER_DROPPED, OPTIMIZER_FILE, read_optimizer_state
from coevolve.stages.grpo_update.stage import GRPO_UPDATE
from coevolve.stages.round_plan import round_plan
from coevolve.storage.layout import checkpoint_name
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS, fake_context

CONFIG = load_config(CONFIGS / "test-tiny.yaml")
ANSI = re.compile(r"\x1b\[")


def speaking(ctx: RunContext) -> RunContext:
    ctx.quiet = False  # fake_context is quiet; a run of `coevolve run` is not
    return ctx


def run_rounds(ctx: RunContext, rounds: range) -> None:
    for round_ in rounds:
        for stage in round_plan(ctx.config, round_):
            run_stage(stage, ctx, round_)


# ---------------------------------------------------------------- item 6: output that is not a terminal


def test_stages_not_on_a_terminal_say_when_they_start_and_end_in_plain_lines(tmp_path, tokenizer, capsys):
    ctx = speaking(fake_context(CONFIG, tmp_path, tokenizer))
    run_rounds(ctx, range(1))
    out, err = capsys.readouterr()
    lines = out.splitlines()
    for stage in round_plan(ctx.config, 0):
        assert f"round 0 {stage.name}: started" in lines
        assert any(re.fullmatch(rf"round 0 {stage.name}: done in \d+\.\d s", line) for line in lines), out
    for progress in ("rollout", "update"):
        finished = re.compile(rf"round 0 {progress}: (\d+)/\1 \(100 %\) after \d+\.\d s")
        assert any(finished.fullmatch(line) for line in lines), out
    assert len([line for line in lines if line.startswith("round 0 rollout: ") and "%" in line]) <= 4
    assert not ANSI.search(out) and not ANSI.search(err)

    run_stage(round_plan(ctx.config, 0)[-1], ctx, 0)
    last = round_plan(ctx.config, 0)[-1].name
    assert re.search(rf"^round 0 {last}: done in \d+\.\d s \(cached\)$", capsys.readouterr().out, re.M)


def test_a_quiet_context_says_nothing(tmp_path, tokenizer, capsys):
    ctx = fake_context(CONFIG, tmp_path, tokenizer)
    run_stage(round_plan(ctx.config, 0)[0], ctx, 0)
    assert capsys.readouterr().out == ""


def test_a_long_progress_writes_a_line_per_quarter_and_one_after_each_quiet_half_minute(monkeypatch):
    lines: list[str] = []
    progress = PlainProgress("round 3 rollout", 1000, lines.append)
    for _ in range(1000):
        progress.advance()
    assert [line.split(" after ")[0] for line in lines] == [
        "round 3 rollout: 250/1000 (25 %)", "round 3 rollout: 500/1000 (50 %)",
        "round 3 rollout: 750/1000 (75 %)", "round 3 rollout: 1000/1000 (100 %)"]  # fmt: skip

    now = [0.0]
    monkeypatch.setattr(context_module.time, "monotonic", lambda: now[0])
    lines.clear()
    slow = PlainProgress("round 3 update", 100, lines.append)
    for _ in range(20):  # 20 steps, 10 s each: 200 s without reaching a quarter
        now[0] += 10
        slow.advance()
    assert [line.split(": ")[1] for line in lines] == [
        f"{step}/100 ({step} %) after {10 * step:.1f} s" for step in (3, 6, 9, 12, 15, 18)]  # fmt: skip


def test_the_cli_piped_prints_plain_stage_lines_without_escape_codes(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    ctx = open_run(CONFIG, "piped", tmp_path, quiet=True)
    save_resolved_config(ctx)
    run_stage(round_plan(CONFIG, 0)[0], ctx, 0)
    result = CliRunner().invoke(app, ["stage", "bootstrap", "--run", "piped", "--round", "0", "--force",
                                      "--root", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "round 0 bootstrap: started\n" in result.output
    assert re.search(r"^round 0 bootstrap: done in \d+\.\d s$", result.output, re.M)
    assert not ANSI.search(result.output)


def test_library_deprecation_notices_are_not_shown_without_verbose(monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_libraries()
        warnings.warn("`foo` is deprecated and will be removed in v6", FutureWarning, stacklevel=1)
        warnings.warn("old API", DeprecationWarning, stacklevel=1)
        warnings.warn("something is off", UserWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["something is off"]


# ---------------------------------------------------------------- item 5: optimizer state in the newest two


def test_only_the_newest_two_checkpoints_keep_optimizer_state_and_the_run_continues(
    tmp_path, tokenizer, monkeypatch, capsys
):
    config = load_config(CONFIGS / "test-tiny.yaml", ["train.keep_checkpoints=3"])
    ctx = fake_context(config, tmp_path, tokenizer)
    run_rounds(ctx, range(2))
    first, second = ctx.store.layout.checkpoint_dir(0), ctx.store.layout.checkpoint_dir(1)
    assert (first / OPTIMIZER_FILE).is_file() and (second / OPTIMIZER_FILE).is_file()
    written = {path: path.read_bytes() for path in ctx.store.layout.run_dir.glob("round=*/stage=*/_manifest.json")}
    run_rounds(ctx, range(2, 3))
    third = ctx.store.layout.checkpoint_dir(2)
    assert not (first / OPTIMIZER_FILE).exists() and (first / OPTIMIZER_DROPPED).is_file()
    assert "round=2 was saved" in (first / OPTIMIZER_DROPPED).read_text()
    assert (second / OPTIMIZER_FILE).is_file() and (third / OPTIMIZER_FILE).is_file()
    # no stage rewrote an older round's manifest: round 0's still records the optimizer state it saved,
    # and the note beside the dropped file tells `coevolve compare` (as `coevolve run`) it is gone on purpose
    assert {path: path.read_bytes() for path in written} == written
    assert OPTIMIZER_FILE in ctx.store.manifest(0, "grpo_update").files[checkpoint_name(0)]
    assert changed_files(ctx.store.layout) == []
    with pytest.raises(FileNotFoundError, match=r"optimizer\.pt: optimizer state dropped when round=2 was"):
        read_optimizer_state(first)

    # a new process: every stage of rounds 0 to 2 is still cached (files checked against their hashes)
    monkeypatch.setattr(file_hashes, "_HASHED", {})
    fresh = speaking(fake_context(config, tmp_path, tokenizer))
    for round_ in range(3):
        for stage in round_plan(fresh.config, round_):
            key = stage_key(stage, fresh, round_)
            assert is_cached(stage, fresh, round_, key) is not None, (stage.name, round_)
    assert fresh.use_policy(0).optimizer.state == {}  # round 0's weights load; its optimizer is fresh

    # the newest update computed again continues from round 1's optimizer state: the same weights
    newest = (third / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert not run_stage(GRPO_UPDATE, fresh, 2, force=True).cached
    assert "starts fresh" not in capsys.readouterr().out
    assert (third / "model.safetensors").read_bytes() == newest

    # a forced update of round 1 continues from round 0's weights: a fresh optimizer, said
    forced = speaking(fake_context(config, tmp_path, tokenizer))
    assert not run_stage(GRPO_UPDATE, forced, 1, force=True).cached
    assert "round 1 update: the optimizer starts fresh: round 0's checkpoint kept no optimizer state" in (
        capsys.readouterr().out)


class StoreKilledBeforeItsManifests(RunStore):
    """A fake store: writes artifacts, then fails where a manifest would be written, as a killed run."""

    def write_manifest(self, manifest) -> None:
        raise OSError("killed")


def test_an_update_killed_before_its_manifest_still_finds_the_state_it_started_from(tmp_path, tokenizer):
    """The clean-up of older checkpoints runs after the update's manifest is written: an update that fails
    before it (here: its manifest cannot be written) leaves the checkpoint it continued from whole."""
    config = load_config(CONFIGS / "test-tiny.yaml", ["train.keep_checkpoints=1"])
    ctx = fake_context(config, tmp_path, tokenizer)
    run_rounds(ctx, range(1))
    first = ctx.store.layout.checkpoint_dir(0)
    for stage in round_plan(config, 1):
        if stage.name == "grpo_update":
            break
        run_stage(stage, ctx, 1)
    ctx.store = StoreKilledBeforeItsManifests(ctx.store.layout)
    with pytest.raises(OSError, match="killed"):
        run_stage(GRPO_UPDATE, ctx, 1)
    assert (first / OPTIMIZER_FILE).is_file() and (first / "model.safetensors").is_file()


def test_weights_are_saved_in_the_dtype_the_model_trains_in(tmp_path):
    import torch
    from safetensors import safe_open

    from coevolve.llm.models import load_model
    from coevolve.rl.checkpoint import save_checkpoint
    from coevolve.rl.update import make_optimizer

    for dtype in ("bfloat16", "float32"):
        model, tok = load_model("tiny-random-llama", dtype=dtype)
        directory = tmp_path / dtype
        save_checkpoint(model, tok, make_optimizer(model, 1e-3), directory)
        with safe_open(str(directory / "model.safetensors"), framework="pt") as weights:
            saved = {weights.get_tensor(name).dtype for name in weights.keys()}  # noqa: SIM118
        assert saved == {getattr(torch, dtype)}
