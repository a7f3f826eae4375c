"""Every benchmark writes its tables with one writer (teachspec/bench/table.py): a header, its rule, and rows
with exactly the header's cells, which it refuses otherwise."""

import importlib

import pytest

from teachspec.bench.table import row, table

# a small result of each bench, with every key its markdown reads
RESULTS = {'radix': {'device': 'cpu',
                     'pair': 'tiny',
                     'cache_tokens': 4096,
                     'rounds': 3,
                     'speculate': None,
                     'machine': None,
                     'workloads': {'chat': {'best_hit_rate': 0.5,
                                            'description': 'd',
                                            'prompt_tokens': 100,
                                            'rows': [{'config': 'off',
                                                      'throughput_ratio': 1.0,
                                                      'hit_rate': 0.0,
                                                      'prefill_computed': 100,
                                                      'prefill_saved': 0,
                                                      'peak_cached_tokens': 0,
                                                      'cache_time_share': 0.0,
                                                      'outputs_identical_to_cache_off': True},
                                                     {'config': 'lpm',
                                                      'throughput_ratio': 1.5,
                                                      'hit_rate': 0.4,
                                                      'prefill_computed': 60,
                                                      'prefill_saved': 40,
                                                      'peak_cached_tokens': 300,
                                                      'cache_time_share': 0.012,
                                                      'outputs_identical_to_cache_off': True}]},
                                   'few': {'best_hit_rate': None,
                                           'description': 'e',
                                           'prompt_tokens': 10,
                                           'rows': [{'config': 'off',
                                                     'throughput_ratio': 1.0,
                                                     'hit_rate': 0.0,
                                                     'prefill_computed': 100,
                                                     'prefill_saved': 0,
                                                     'peak_cached_tokens': 0,
                                                     'cache_time_share': 0.0,
                                                     'outputs_identical_to_cache_off': False}]}}},
           'speculative': {'device': 'cpu',
                           'pair': 'tiny',
                           'prompts': 4,
                           'new_tokens': 64,
                           'threads': 2,
                           'machine': None,
                           'workloads': {'docs': {'greedy_outputs_identical': True,
                                                  'noise': 0.03,
                                                  'rows': [{'method': 'plain',
                                                            'speedup': 1.0,
                                                            'tokens_per_s': 100.0,
                                                            'time_split': {'draft_ms': 0.0,
                                                                           'target_ms': 5.0,
                                                                           'engine_ms': 1.0}},
                                                           {'method': 'ours k=2',
                                                            'speedup': 1.7,
                                                            'decoding_speedup': 1.8,
                                                            'tokens_per_s': 170.0,
                                                            'tokens_per_target_pass': 2.3,
                                                            'alpha': 0.8,
                                                            'c': 0.1,
                                                            'pass_cost': 1.1,
                                                            'predicted': 2.0,
                                                            'measured_over_predicted': 0.9,
                                                            'predicted_cost_aware': 1.8,
                                                            'measured_over_cost_aware': 0.95,
                                                            'time_split': {'draft_ms': 1.0,
                                                                           'target_ms': 3.0,
                                                                           'engine_ms': 1.0}}]},
                                         'code': {'greedy_outputs_identical': None,
                                                  'rows': [{'method': 'plain', 'speedup': 1.0,
                                                            'tokens_per_s': 90.0}]}}},
           'serving': {'pair': 'tiny',
                       'prompts': 4,
                       'new_tokens': 32,
                       'machine': None,
                       'all_identical': True,
                       'methods': {'teachspec plain': {'tokens_per_s': 100.0, 'speedup': 1.0, 'identical': True},
                                   'vLLM model': {'tokens_per_s': 150.0,
                                                  'speedup': 1.5,
                                                  'alpha': 0.7,
                                                  'tokens_per_target_pass': 2.1,
                                                  'identical': True}},
                       'batched': {'vLLM plain': {8: {'tokens_per_s': 220.0}, 32: {'tokens_per_s': 274.0}}},
                       'programs': {'classify': {'runs': 8,
                                                 'identical': True,
                                                 'server_hit_rate': 0.5,
                                                 'local_hit_rate': 0.55}}},
           'contention': {'pair': 'tiny',
                          'cpus': 2,
                          'new_tokens': 64,
                          'repeats': 3,
                          'k': 3,
                          'machine': None,
                          'rows': [{'busy': 0,
                                    'setting': 'auto',
                                    'threads': 2,
                                    'plain_tokens_per_s': 100.0,
                                    'speculative_tokens_per_s': 150.0,
                                    'speedup': 1.5,
                                    'plain_of_quiet': None,
                                    'speedup_of_quiet': None,
                                    'waited': None},
                                   {'busy': 1,
                                    'setting': 'auto',
                                    'threads': 1,
                                    'plain_tokens_per_s': 60.0,
                                    'speculative_tokens_per_s': 80.0,
                                    'speedup': 1.33,
                                    'plain_of_quiet': 0.6,
                                    'speedup_of_quiet': 0.89,
                                    'waited': 0.25}],
                          'after': {'back_after_requests': 2, 'plain_of_quiet': [0.8, 0.95], 'threads': [1, 2]}},
           'program': {'device': 'cpu',
                       'pair': 'tiny',
                       'cache_tokens': 4096,
                       'rounds': 3,
                       'speculate': 'model',
                       'k': 2,
                       'machine': None,
                       'examples': {'react': {'runs': 4,
                                              'calls': 12,
                                              'prompt_tokens': 900,
                                              'hit_rate': 0.7,
                                              'seconds_off': 2.0,
                                              'seconds_on': 1.2,
                                              'throughput_ratio': 1.67,
                                              'outputs_identical': True}}}}


def test_a_table_is_a_header_its_rule_and_a_row_per_line():
    assert table(["a", "b"], [[1, ""], ["x", True]]) == ["| a | b |", "|---|---|", "| 1 |  |", "| x | True |"]
    assert row(["only"]) == "| only |"


def test_a_row_with_the_wrong_number_of_cells_is_refused():
    with pytest.raises(ValueError, match=r"row 1 has 3 cells and the header 2"):
        table(["a", "b"], [[1, 2], [1, 2, 3]])


def tables(text: str) -> list[list[str]]:
    """The markdown tables in `text`, each as its lines."""
    out, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            out.append(current)
            current = []
    return out


def cells(line: str) -> int:
    return line.count(" | ") + 1 if line.startswith("| ") else line.count("---|")


@pytest.mark.parametrize("bench", sorted(RESULTS))
def test_every_bench_writes_tables_whose_rows_fit_their_header(bench):
    text = importlib.import_module(f"teachspec.bench.{bench}").markdown(RESULTS[bench])
    found = tables(text)
    assert found, text
    for lines in found:
        header, rule, *rows = lines
        assert rule == "|" + "---|" * cells(header), lines
        assert rows and all(cells(r) == cells(header) for r in rows), lines
