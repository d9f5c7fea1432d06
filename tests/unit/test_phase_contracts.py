"""A phase's contract is the one place its vocabulary is declared (`coevolve.contracts`): a signal kind, or a
verification check with its reason code, added by a package of its own with one call each, is extracted or
applied, counted in the round summary, logged by tracking, shown by the web view and queryable in SQL,
without a change to any other file."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
from starlette.testclient import TestClient

from coevolve.config import ConfigError, load_config
from coevolve.contracts.verify import reason_code, reason_code_sql
from coevolve.flows.summary import markdown_summary, round_line, round_metrics
from coevolve.flows.tracking import round_points
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.round_plan import EVOLUTION
from coevolve.storage.catalog import query
from coevolve.ui.app import create_app
from tests.conftest import CONFIGS, fake_context

TOY_PACKAGE = '''
"""A signal kind and a verification check of their own, each added with one call."""
import polars as pl

from coevolve.contracts.signals import SignalKind
from coevolve.contracts.verify import VerdictReason
from coevolve.stages.signals.rules import add_rule, marked_signals
from coevolve.stages.verify.candidates import Rejected
from coevolve.stages.verify.checks import add_check

STUCK = SignalKind("stuck", "s", "a failed sample of the round", evidence={"reward": "the sample's reward"})
REASON = VerdictReason("one-turn", "a task of one turn is turned away")


def stuck_signals(ledger):
    failed = ledger.trajectories.filter(pl.col("round") == ledger.round, pl.col("reward") < 0.5)
    return marked_signals(failed, "stuck", ledger.round, pl.struct("reward"))


def asks_more_than_one_turn(ctx, draft):
    if len(draft.task.turns) == 1:
        raise Rejected("one-turn: the task asks one thing only")


add_rule(STUCK, stuck_signals)
add_check(asks_more_than_one_turn, REASON)
'''


@pytest.fixture
def toy_phase(tmp_path, monkeypatch):
    """The package above, written to a temporary folder and imported; what it added is removed after."""
    folder = tmp_path / "packages"
    (folder / "toy_phase").mkdir(parents=True)
    (folder / "toy_phase" / "__init__.py").write_text(textwrap.dedent(TOY_PACKAGE))
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("toy_phase")
    yield module
    from coevolve.stages.signals.rules import remove_rule
    from coevolve.stages.verify.checks import remove_check

    remove_rule("stuck")
    remove_check(module.asks_more_than_one_turn, "one-turn")
    sys.modules.pop("toy_phase", None)


def test_an_undeclared_signal_kind_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"signals.kinds: unknown signal kind\(s\) \['stuck'\]"):
        load_config(CONFIGS / "test-tiny.yaml", ["signals.kinds=[boundary, stuck]"])


def test_a_kind_and_a_check_of_a_package_show_up_everywhere(toy_phase, tmp_path, tokenizer):
    cfg = load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", "explore.rounds=1",
                                                   "signals.kinds=[forgetting, boundary, rare, stuck]"])  # fmt: skip
    ctx = fake_context(cfg, tmp_path, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION):
        run_stage(stage, ctx, 0)

    # SQL: the rows are there, and the reason code is told from the reason text
    kinds = {r["kind"]: r["n"] for r in query(tmp_path, "SELECT kind, count(*) AS n FROM signals GROUP BY kind").to_pylist()}
    assert kinds.get("stuck", 0) > 0
    codes = query(tmp_path, f"""SELECT {reason_code_sql()} AS code, count(*) AS n FROM verifications
                                WHERE outcome = 'discard' GROUP BY ALL""").to_pylist()  # fmt: skip
    turned_away = {r["code"]: r["n"] for r in codes}.get("one-turn", 0)
    assert turned_away > 0 and reason_code("one-turn: the task asks one thing only") == "one-turn"

    # the round summary: the kind under its letter, the check's discards under its code
    row = round_metrics(ctx.store, 0)
    assert row["stuck_signals"] == kinds["stuck"] and row["discarded_one_turn"] == turned_away
    assert f"/{kinds['stuck']} (f/b/r/s)" in round_line(row)
    assert f"| discarded_one_turn | {turned_away} |" in markdown_summary("evo", row)

    # tracking: both logged under the evolution's tags
    values = round_points({0: []}, row)[0].values
    assert values["evolution/stuck_signals"] == kinds["stuck"]
    assert values["evolution/discarded/one_turn"] == turned_away

    # the web view: a column of the signals table with the kind's evidence explained; the reason's column
    client = TestClient(create_app(tmp_path), base_url="http://127.0.0.1")
    signals = client.get("/runs/evo/signals").text
    assert "<th>stuck</th>" in signals and "a failed sample of the round" in signals
    assert "the sample&#39;s reward" in signals or "the sample's reward" in signals
    verifications = client.get("/runs/evo/verifications").text
    assert "<th>one-turn</th>" in verifications


def test_a_stage_declares_what_it_writes_from_its_contract():
    from coevolve.contracts import signals, verify
    from coevolve.stages.round_plan import STAGES

    assert STAGES["signals"].writes is signals.WRITES and STAGES["bootstrap-verify"].writes is verify.WRITES
    verify.WRITES.check("verify", {"verifications", "steps"})  # a subset is fine
    with pytest.raises(ValueError, match=r"stage 'verify' wrote \['tasks'\], which its StageDef does not declare"):
        verify.WRITES.check("verify", {"verifications", "tasks"})
