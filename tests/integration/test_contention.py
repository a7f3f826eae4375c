"""`teachspec bench contention` with tiny settings: the shape of its table, not its speed (that is the benchmark's
job, never a test's)."""

from teachspec.bench import contention
from teachspec.models import load_pair


def test_the_contention_table_has_a_row_per_busy_count_and_thread_setting():
    result = contention.bench(load_pair("tiny"), busy=[0, 1], new_tokens=4, repeats=1, progress=False)
    rows = result["rows"]
    after = "policy, neighbour after load"
    assert [(r["busy"], r["setting"]) for r in rows] == [(0, "policy"), (0, "torch default"), (1, "policy"),
                                                         (1, "torch default"), (0, after), (1, after)]
    for r in rows:
        assert all(int(t) >= 1 for t in r["threads"].split("/")) and r["plain_tokens_per_s"] > 0 and r["speculative_tokens_per_s"] > 0
        assert abs(r["speedup"] - r["speculative_tokens_per_s"] / r["plain_tokens_per_s"]) < 1e-9 * r["speedup"]
    assert all(r["plain_of_quiet"] == 1.0 and r["speedup_of_quiet"] == 1.0 for r in rows if r["busy"] == 0)
    assert result["machine"] is not None and "busy" in result["machine"]
    table = contention.markdown(result).splitlines()
    rows_md = [line for line in table if line.startswith("| ") and line[2].isdigit()]
    assert len(rows_md) == 6 and rows_md[2].startswith("| 1 | policy: ") and rows_md[5].startswith(f"| 1 | {after}: ")
    left = result["after"]
    assert len(left["plain_of_quiet"]) == len(left["threads"]) == 8 and all(x > 0 for x in left["plain_of_quiet"])
    assert any(line.startswith("after the neighbour left") for line in table)
