"""`coevolve bench faults` counting a JUnit report of the fault suite: faults per kind (a test's `faults`
property for a test that injects several), known failures (xfail) injected and not survived, skips left out,
premises not counted as faults but named when they fail."""

from __future__ import annotations

from coevolve.benchmarks.faults import counts, kind_of

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="t" name="test_premise_the_updates_move_every_weight"><failure message="a weight did not move"/></testcase>
  <testcase classname="t" name="test_a_run_killed_at_every_kill_point_in_turn_completes_with_the_same_rows"><properties><property name="faults" value="13"/></properties></testcase>
  <testcase classname="t" name="test_a_full_disk_stops_with_one_paragraph_and_the_run_then_completes"><skipped type="pytest.skip" message="no tmpfs"/></testcase>
  <testcase classname="t" name="test_a_diverged_update_stops"><error message="timeout"/></testcase>
  <testcase classname="t" name="test_a_byte_flipped[0]"/>
  <testcase classname="t" name="test_a_byte_flipped[1]"><properties><property name="faults" value="3"/></properties><skipped type="pytest.xfail" message="known"/></testcase>
</testsuite></testsuites>
"""


def test_faults_are_counted_per_kind_and_a_failed_premise_is_named(tmp_path):
    report = tmp_path / "faults.xml"
    report.write_text(REPORT)
    injected, survived, premises_failed = counts(report)
    assert dict(injected) == {"kill": 13, "a_diverged_update_stops": 1, "a_byte_flipped": 4}
    assert (survived["kill"], survived["a_diverged_update_stops"], survived["a_byte_flipped"]) == (13, 0, 1)
    assert premises_failed == ["test_premise_the_updates_move_every_weight"]


def test_a_premise_is_no_fault():
    assert kind_of("test_premise_the_updates_move_every_weight") is None
    assert kind_of("test_a_run_killed_at_every_kill_point_in_turn_completes_with_the_same_rows") == "kill"
    assert kind_of("test_a_byte_flipped_in_a_checkpoint[1]") == "a_byte_flipped_in_a_checkpoint"
