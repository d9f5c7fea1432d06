"""`coevolve env list` says in one short line why an environment is not available (the first sentence of
its error); `coevolve env check NAME` has the rest."""

from __future__ import annotations

from typer.testing import CliRunner

from coevolve.cli import app

LONG = ("no task ids for AppWorld split 'train': /data/datasets/train.txt does not exist. AppWorld's server "
        "cannot list a split, so the ids come from its data folder: " + "run `appworld download data` there, " * 12)


def test_an_unavailable_environment_is_one_short_line(monkeypatch):
    from coevolve import envs

    def make(name, **options):
        raise ValueError(LONG)

    monkeypatch.setattr(envs, "available", lambda: ["appworld"])
    monkeypatch.setattr(envs, "make", make)
    result = CliRunner().invoke(app, ["env", "list"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "appworld: not available (no task ids for AppWorld split 'train': /data/datasets/train.txt does not exist); "
        "see `coevolve env check appworld`"]  # fmt: skip
