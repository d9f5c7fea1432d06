"""`coevolve sql` readable at 80 columns: a row wider than the terminal prints as `column | value` lines
(every name whole, long values wrapped under themselves), `--format line` asks for it, `--max-width` cuts a
value, control characters stay visible as `\\x1b`; CSV quotes a value only where CSV needs it."""

from __future__ import annotations

import csv
import io

from typer.testing import CliRunner

from coevolve.cli import app

LINEAGE_ROW = ("SELECT 0 AS signal_round, 'boundary' AS kind, 'db7ecc386fec59ca' AS signal_trajectory, "
               "'e0e1e2e3e4e5e6e7' AS exploration_id, 'c0c1c2c3c4c5c6c7' AS candidate_id, 'accept' AS outcome, "
               "'t0t1t2t3t4t5t6t7' AS task_id, 6 AS later_rollouts, 0.6667 AS later_success")  # fmt: skip
"""The nine columns of the lineage query `coevolve evolution` prints."""


def sql(tmp_path, statement: str, *more: str, columns: int = 80):
    result = CliRunner().invoke(app, ["sql", statement, "--root", str(tmp_path), *more], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_row_wider_than_80_columns_prints_as_lines_with_every_name_whole(tmp_path):
    out = sql(tmp_path, LINEAGE_ROW)
    lines = out.splitlines()
    assert lines[0].startswith("-[ row 1 ]-") and all(len(line) <= 80 for line in lines)
    for name, value in (("signal_round", "0"), ("signal_trajectory", "db7ecc386fec59ca"), ("later_success", "0.6667"),
                        ("candidate_id", "c0c1c2c3c4c5c6c7")):  # fmt: skip
        assert f"{name:<17} | {value}" in lines
    assert "…" not in out


def test_a_narrow_table_stays_a_table(tmp_path):
    out = sql(tmp_path, "SELECT 1 AS a, 'short' AS b")
    assert "-[ row" not in out and "short" in out


def test_line_format_wraps_long_values_cuts_at_max_width_and_shows_escapes(tmp_path):
    statement = "SELECT repeat('x', 150) AS long, chr(27) || '[31mred' AS ansi"
    lines = sql(tmp_path, statement, "--format", "line", "--max-width", "200").splitlines()
    assert lines[1] == "long | " + "x" * 73 and lines[2] == "     | " + "x" * 73 and lines[3] == "     | xxxx"
    assert lines[4] == "ansi | \\x1b[31mred"
    cut = sql(tmp_path, statement, "--format", "line", "--max-width", "10").splitlines()
    assert cut[1] == "long | " + "x" * 9 + "…"


def test_csv_quotes_only_where_needed(tmp_path):
    out = sql(tmp_path, "SELECT 1 AS n, 'plain' AS word, 'a,b' AS comma, 'say \"hi\"' AS quote, NULL AS missing, "
                        "true AS flag, 'two' || chr(10) || 'lines' AS text", "--format", "csv")  # fmt: skip
    assert out.splitlines()[:2] == ["n,word,comma,quote,missing,flag,text", '1,plain,"a,b","say ""hi""",,true,"two']
    assert list(csv.reader(io.StringIO(out)))[1] == ["1", "plain", "a,b", 'say "hi"', "", "true", "two\nlines"]


def test_an_unknown_format_is_one_line_naming_the_choices(tmp_path):
    result = CliRunner().invoke(app, ["sql", "SELECT 1", "--root", str(tmp_path), "--format", "wide"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --format must be auto, table, line, csv or json, got 'wide'"
