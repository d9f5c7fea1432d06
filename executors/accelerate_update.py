"""grpo_update over several processes (GPUs, or CPU processes): `accelerate launch`, started by the stage.

With `train.accelerate_config` set, the grpo_update stage writes a job file and runs

    accelerate launch --config_file <train.accelerate_config> -m coevolve.executors.accelerate_update <job.json>

The job file holds the stage's `rl.trainer.UpdateJob` (the samples files and their sha256, the policy the
round starts from, the model, the settings) and what the launch adds (sharding, metrics file, machines).
Every process builds the starting state from it (`rl.trainer.load_train_state`: the base model, or the
previous round's checkpoint with its optimizer state) and calls `rl.trainer.train_round`, the function the
stage calls in its own process, with its `accelerate.Accelerator`: data-parallel micro-batches, gradients
summed over processes, the same optimizer step everywhere. Process 0 saves the checkpoint (weights,
tokenizer, optimizer state) and the update's metrics; the stage then loads that checkpoint into the flow's
policy (and publishes it to the inference servers), so the flow and every other stage are unchanged.

Processes come from the accelerate config (`num_processes`, GPUs per process; `configs/accelerate/`).
With `model.device: cpu` they are CPU processes talking over gloo (what the tests run); with `cuda` each
takes the GPU of its local rank. By default every process holds the whole model and optimizer (data
parallelism). With `distributed_type: FSDP` in the accelerate config the weights, gradients and optimizer
state are sharded over the processes (`rl.sharding`, PyTorch FSDP2; `fsdp_config.fsdp_reshard_after_forward`
is read, the other `fsdp_config` keys are not; full fine-tuning only, not LoRA; the KL reference of
`train.beta > 0` stays a whole copy per process) and the checkpoint is gathered onto process 0 in the
one-process layout. Not DeepSpeed ZeRO.

Several machines (`num_machines` > 1 in the accelerate config, `num_processes` counting all of them):
the flow's machine is machine 0 and the stage launches its processes as above; every other machine runs

    coevolve update-worker --run <run> --machine-rank <r>

which waits for the run's launched updates (`serve_machine`) and joins each one with `accelerate launch
--machine_rank <r>` on the same job file. The run directory must be on a file system all machines
share (the job file, the samples files it names and checkpoints are read from it), and the model name must resolve on each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from coevolve.config import ConfigError, find_config
from coevolve.processes import die_with_parent
from coevolve.storage.parquet import write_text_atomic

if TYPE_CHECKING:
    from coevolve.rl.trainer import UpdateJob

JOB_FILE = "job.json"
METRICS_FILE = "metrics.json"
LOG_FILE = "launch.log"


def launch_update(job: UpdateJob, accelerate_config: str, *, job_dir: Path) -> dict[str, float]:
    """Run `job` under `accelerate launch` with the accelerate config file `accelerate_config`
    (`train.accelerate_config`); returns the metrics process 0 wrote."""
    try:  # a relative path not found here falls back to the packaged configs/accelerate/ files
        launcher = find_config(accelerate_config)
    except ConfigError:
        raise FileNotFoundError(f"train.accelerate_config: no accelerate config file at "
                                f"{accelerate_config!r}") from None
    sharding, machines = sharding_of(launcher), machines_of(launcher)
    if sharding is not None and job.model.lora_rank:
        raise ValueError(f"train.accelerate_config: {launcher} shards the weights (FSDP), which needs full "
                         f"fine-tuning; set train.lora_rank: 0 or use a data-parallel accelerate config")  # fmt: skip
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / METRICS_FILE).unlink(missing_ok=True)
    launch = {
        "update": job.to_json(), "metrics": str(job_dir / METRICS_FILE), "sharding": sharding,
        "accelerate_config": str(launcher.resolve()), "machines": machines, "launch": uuid.uuid4().hex,
    }  # fmt: skip
    write_text_atomic(json.dumps(launch, indent=2) + "\n", job_dir / JOB_FILE)  # workers poll for it
    with open(job_dir / LOG_FILE, "w") as log:
        code = subprocess.run(_launch_command(job_dir / JOB_FILE, launcher), stdout=log, stderr=subprocess.STDOUT,
                              preexec_fn=die_with_parent).returncode  # ends with the flow, even on kill -9
    metrics = job_dir / METRICS_FILE
    if code or not metrics.is_file():
        (job_dir / JOB_FILE).unlink(missing_ok=True)  # no worker joins a failed launch; a rerun writes a new one
        tail = (job_dir / LOG_FILE).read_text()[-3000:]
        raise RuntimeError(f"accelerate launch of the round {job.round} update failed (exit {code}); "
                           f"log {job_dir / LOG_FILE}:\n{tail}")  # fmt: skip
    return json.loads(metrics.read_text())


def _launch_command(job_file: Path, launcher: Path, machine_rank: int | None = None) -> list[str]:
    accelerate = Path(sys.executable).with_name("accelerate")
    rank = [] if machine_rank is None else ["--machine_rank", str(machine_rank)]
    return [str(accelerate), "launch", "--config_file", str(launcher), *rank, "-m", "coevolve.executors.accelerate_update",
            str(job_file)]  # fmt: skip


def _settings(launcher: Path) -> dict[str, Any]:
    try:
        settings = yaml.safe_load(launcher.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"train.accelerate_config: {launcher} is not YAML: {exc}") from exc
    if not isinstance(settings, dict):
        raise ValueError(f"train.accelerate_config: {launcher} is not a mapping of accelerate settings")
    return settings


def machines_of(launcher: Path) -> int:
    """How many machines the accelerate config `launcher` spans; the stage's own machine must be machine 0."""
    settings = _settings(launcher)
    try:
        machines, rank = int(settings.get("num_machines") or 1), int(settings.get("machine_rank") or 0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"train.accelerate_config: {launcher}: num_machines and machine_rank must be "
                         f"integers") from exc  # fmt: skip
    if machines < 1:
        raise ValueError(f"train.accelerate_config: {launcher}: num_machines must be >= 1, got {machines}")
    if machines > 1 and rank != 0:
        raise ValueError(f"train.accelerate_config: {launcher} sets machine_rank {rank}; the flow's machine is "
                         f"machine 0 (the others join with `coevolve update-worker --machine-rank R`)")  # fmt: skip
    return machines


def sharding_of(launcher: Path) -> dict[str, bool] | None:
    """FSDP settings when the accelerate config `launcher` asks for sharded weights, else None."""
    settings = _settings(launcher)
    if str(settings.get("distributed_type", "")).upper() != "FSDP":
        return None
    fsdp = settings.get("fsdp_config") or {}
    return {"reshard_after_forward": bool(fsdp.get("fsdp_reshard_after_forward", True))}


def pending_jobs(run_dir: Path) -> list[Path]:
    """Job files of `run_dir`'s launched updates that have not finished (no metrics yet), by round."""

    def round_of(job_file: Path) -> int:
        found = re.search(r"round=(\d+)", job_file.parent.name)
        return int(found.group(1)) if found else -1

    jobs = (run_dir / "checkpoints").glob(f"round=*.launch/{JOB_FILE}")
    return sorted((j for j in jobs if not (j.parent / METRICS_FILE).exists()), key=round_of)


def serve_machine(run_dir: Path, machine_rank: int, *, jobs: int | None = None, poll_s: float = 1.0,
                  report: Callable[[str], None] = print) -> int:  # fmt: skip
    """Machine `machine_rank` of the run's multi-machine updates: join every launched update of `run_dir`
    that spans more machines than this rank (`accelerate launch --machine_rank`, log `launch-machine-<r>.log`
    next to the job), each launch once, until `jobs` have been joined (None: forever). Returns how many
    ended with exit status 0."""
    if machine_rank < 1:
        raise ValueError(f"machine rank must be >= 1 (machine 0 is the flow's), got {machine_rank}")
    report(f"machine {machine_rank}: waiting for the launched updates of {run_dir}")
    joined: set[str] = set()
    succeeded = 0
    while jobs is None or len(joined) < jobs:
        for job_file in pending_jobs(run_dir):
            try:
                job = json.loads(job_file.read_text())
            except FileNotFoundError:  # its launch failed meanwhile, and the stage removed it
                continue
            if job.get("launch") in joined or int(job.get("machines", 1)) <= machine_rank:
                continue
            joined.add(job["launch"])
            report(f"joining {job_file.parent.name} as machine {machine_rank} of {job['machines']}")
            with open(job_file.parent / f"launch-machine-{machine_rank}.log", "w") as log:
                command = _launch_command(job_file, Path(job["accelerate_config"]), machine_rank)
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
            succeeded += code == 0
            report(f"{job_file.parent.name}: exit {code}, log {log.name}")
            if jobs is not None and len(joined) >= jobs:
                break
        else:
            time.sleep(poll_s)
    return succeeded


def run_job(launch: dict[str, Any]) -> None:
    """One process of a launched update: `rl.trainer.train_round` on the job's state, built here (see the
    module docstring)."""
    from accelerate import Accelerator

    from coevolve.rl.trainer import UpdateJob, load_train_state, train_round

    job = UpdateJob.from_json(launch["update"])
    accelerator = Accelerator(cpu=job.model.device == "cpu")
    state = load_train_state(job, device=str(accelerator.device), sharding=launch.get("sharding"))
    result = train_round(job, state, accelerator=accelerator)
    if accelerator.is_main_process:
        metrics = {**result.as_dict(), "processes": accelerator.num_processes}
        Path(launch["metrics"]).write_text(json.dumps(metrics, indent=2) + "\n")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    run_job(json.loads(Path(sys.argv[1]).read_text()))
