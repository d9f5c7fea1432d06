"""The `coevolve` command groups around runs: `env` (environments), `models` (the model cache), `engine`
(inference servers), `bench` (the benchmark suite). Registered in `coevolve.cli`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from coevolve.cli.support import Overrides, fail, user_errors


def command_group(help_: str) -> typer.Typer:
    """A group of commands whose help reflows like the top level's (see `coevolve.cli.app`)."""
    return typer.Typer(no_args_is_help=True, rich_markup_mode="markdown", help=help_)


env_app = command_group("Environments: list them, replay reference solutions.")
models_app = command_group("Models: resolve and convert into the local cache.")
engine_app = command_group("Inference servers for the policy (vLLM, in its own venv).")


@env_app.command("list")
def env_list() -> None:
    """Environments, their splits and task counts (or what is missing to use them)."""
    from coevolve import envs
    from coevolve.flows.env_check import listing

    for name in envs.available():
        if (line := listing(name)) is not None:  # an adapter: its options name the environment
            typer.echo(line)
            continue
        try:
            env = envs.make(name)
            counts = ", ".join(f"{s} {len(env.tasks(s))}" for s in env.splits())
        except Exception as exc:  # an environment that needs a server or data not installed here
            counts = f"not available ({first_sentence(str(exc))}); see `coevolve env check {name}`"
        typer.echo(f"{name}: {counts}")


def first_sentence(text: str, limit: int = 140) -> str:
    """The first sentence of `text`'s first line, at most `limit` characters (`env check` says the rest)."""
    line = (text.strip().splitlines() or [""])[0]
    sentence = line.split(". ", 1)[0].rstrip(".")
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


@env_app.command("check")
def env_check(
    name: Annotated[str | None, typer.Argument(help="Environment name (default: the config's env.name).")] = None,
    config: Annotated[Path | None, typer.Option(help="Run config whose env section (name, options) to check.")] = None,
) -> None:
    """Say what an environment needs and whether it is there (exit 1 if something is missing)."""
    from coevolve.config import load_config
    from coevolve.flows.env_check import check_environment, ready

    options = {}
    if config is not None:
        try:
            env = load_config(config).env
        except user_errors() as exc:
            fail(str(exc))
        if name not in (None, env.name):
            fail(f"{config} configures env.name {env.name!r}, not {name!r}")
        name, options = env.name, dict(env.options)
    if name is None:
        fail("name an environment or pass --config CONFIG (`coevolve env list` shows the names)")
    findings = check_environment(name, options)
    for line in findings:
        typer.echo(line)
    if not ready(findings):
        raise typer.Exit(1)


@env_app.command("replay")
def env_replay(
    name: Annotated[str, typer.Argument(help="Environment name.")],
    split: Annotated[str, typer.Option(help="Split to replay.")] = "test",
) -> None:
    """Replay every reference solution of a split through the episode loop; prints the success rate."""
    from coevolve import envs
    from coevolve.envs.replay import replay_reference

    env = envs.make(name)
    if split not in env.splits():
        fail(f"{name} has no split {split!r}; splits: {', '.join(env.splits())}")
    tasks = env.tasks(split)
    results = [replay_reference(envs.make(name), task) for task in tasks]
    ok = sum(r.success for r in results)
    typer.echo(f"{name}/{split}: {ok}/{len(tasks)} reference solutions succeed ({ok / max(len(tasks), 1):.1%})")
    if ok < len(tasks):
        raise typer.Exit(1)


@models_app.command("resolve")
def models_resolve(name: Annotated[str, typer.Argument(help="smollm2-135m, tiny-random-llama, a dir or hub id.")]):
    """Resolve a model name to a local HF directory (converting it once if needed)."""
    from coevolve.llm.models import resolve_model

    typer.echo(resolve_model(name))


@models_app.command("warm-start")
def models_warm_start(
    config: Annotated[Path, typer.Argument(help="Run config with a `warm_start` section (e.g. configs/demo.yaml).")],
    rebuild: Annotated[bool, typer.Option(help="Train the starts again, even where cached or shipped.")] = False,
    ship: Annotated[bool, typer.Option(help="Copy the starts' LoRA adapters into configs/warm-starts/.")] = False,
    overrides: Overrides = None,
) -> None:
    """Build a config's warm starts into the model cache: merged from the shipped adapters where there are
    (seconds), else trained (minutes). `--rebuild --ship` is how the shipped adapters are made."""
    from coevolve.config import load_config
    from coevolve.stages.warm_start.adapters import ship as ship_start
    from coevolve.stages.warm_start.build import build_warm_starts, start_paths, with_warm_starts

    try:
        spec = load_config(config, overrides or [])
    except user_errors() as exc:
        fail(str(exc))
    named = with_warm_starts(spec)
    starts = start_paths(spec, named)
    if not starts:
        fail(f"{config}: no warm start to build (warm_start.policy_tasks and warm_start.teacher_tasks are 0)")
    try:
        build_warm_starts(spec, named, rebuild=rebuild)
        for path in starts:
            typer.echo(f"{path}" + (f" -> shipped as {ship_start(path)}" if ship else ""))
    except (*user_errors(), ValueError) as exc:
        fail(str(exc))


@engine_app.command("serve")
def engine_serve(
    config: Annotated[Path, typer.Argument(help="Run config whose model.servers[SERVER] (or teacher) is served.")],
    server: Annotated[int, typer.Option(help="Which entry of model.servers to start.")] = 0,
    teacher: Annotated[bool, typer.Option(help="Serve the config's `openai` teacher at teacher.base_url instead.")] = False,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    venv: Annotated[Path | None, typer.Option(help="The vLLM venv (default .venv-vllm; make vllm-env).")] = None,
    kv_cache_gib: Annotated[int, typer.Option(help="KV cache in GiB (vLLM's CPU build).")] = 2,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's share of GPU memory (CUDA build).")] = 0.85,
    dry_run: Annotated[bool, typer.Option(help="Print the command instead of running it.")] = False,
    overrides: Overrides = None,
) -> None:
    """Start a vLLM server for the policy (or the teacher) in the vLLM venv, until stopped (llm/vllm_server.py)."""
    import shlex

    from coevolve.config import load_config
    from coevolve.llm import vllm_server

    try:
        cfg = load_config(config, overrides or [])
        environment = vllm_server.find_venv(venv) if not dry_run else Path(venv or vllm_server.VENV)
        spec = (vllm_server.teacher_spec(cfg) if teacher
                else vllm_server.policy_spec(cfg, server, write_template=not dry_run))  # fmt: skip
        argv, env = vllm_server.serve_command(spec, venv=environment, host=host, kv_cache_gib=kv_cache_gib,
                                              gpu_memory_utilization=gpu_memory_utilization)  # fmt: skip
    except (*user_errors(), ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    line = " ".join(f"{k}={v}" for k, v in env.items()) + " " + shlex.join(argv)
    if dry_run:
        typer.echo(line)
        return
    typer.echo(f"starting: {line}", err=True)
    raise typer.Exit(vllm_server.run_server(argv, env))


def bench(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Benchmark name, `list` or `report`.")] = None,
) -> None:
    """Benchmarks: `coevolve bench list`, `coevolve bench NAME [ARGS...]`, `coevolve bench report` (benchmarks/)."""
    from coevolve.benchmarks.suite import entry, main

    if name is None or name in ("-h", "--help"):
        main([])
        return
    try:
        run = entry(name)
    except ValueError as exc:
        fail(str(exc))
    run(list(ctx.args))
