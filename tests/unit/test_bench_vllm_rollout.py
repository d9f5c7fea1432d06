"""vllm-rollout's bookkeeping: the arms alternate, per-round figures are averaged over the repeats, and the
server's counters are read from its Prometheus text (summed over label sets, histogram buckets ignored)."""

from __future__ import annotations

from coevolve.benchmarks.vllm_rollout import alternating, mean_rounds, parse_counters

METRICS = """# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 6187.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 4224.0
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 30.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1200.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 150.0
"""


def test_the_arms_alternate_so_a_drifting_load_weighs_on_both():
    assert alternating(1) == ["local", "served"]
    assert alternating(3) == ["local", "served", "served", "local", "local", "served"]


def test_round_figures_are_averaged_over_the_repeats_that_have_the_round():
    first = {0: {"tokens_per_second": 40.0, "wall_s": 100.0, "start": 0.0}}
    second = {0: {"tokens_per_second": 60.0, "wall_s": 80.0}, 1: {"tokens_per_second": 1.0, "wall_s": 1.0}}
    assert mean_rounds([first, second]) == {0: {"tokens_per_second": 50.0, "wall_s": 90.0}}


def test_server_counters_are_read_from_prometheus_text():
    assert parse_counters(METRICS) == {"prefix_cache_queries_total": 6187.0, "prefix_cache_hits_total": 4224.0,
                                       "iteration_tokens_total_sum": 1200.0, "iteration_tokens_total_count": 150.0}
    assert set(parse_counters("")) == set(parse_counters(METRICS)) and not any(parse_counters("").values())
