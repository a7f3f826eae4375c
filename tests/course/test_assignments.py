"""The assignments: the student copies a student browses are exactly what the sources give and hold no solution,
each graded check cell is one visible check of one part, the copies fail exactly at their check cells until the
exercises are written, every graded part is earned by the solution, each classic bug loses its own part and
nothing else with feedback that names the likely cause, submissions that game the checks (delegating to
teachspec, replacing the check functions, the reference or the random source) earn nothing for what they fake,
and every reference the grader compares with agrees with the library's own implementation.

A submission is graded here as the graders grade it (teachspec.course.autograde): the definitions of its code
cells, each part judged in the sandbox on the visible and then the hidden cases."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch
import yaml

from helpers import course_submissions as cs
from teachspec.course import checks, grading
from teachspec.course.checks import CheckFailed
from teachspec.course.definitions import from_sources
from teachspec.course.student import BEGIN, check_cells, exercise_cells, main, refresh, student_text, student_version

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted(cs.SOURCES.glob("a*.ipynb"))
COPIES = sorted(cs.STUDENT_COPIES.glob("a*.ipynb"))
SECRET = b"test-secret"  # the course's secret for these tests: the hidden cases are drawn from it
CHECK = re.compile(r'check\("(a\d+\.\w+)"')


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _parts(nb: nbformat.NotebookNode) -> list[str]:
    """The parts the notebook's graded check cells judge, in order ("a1.decisions", ...)."""
    return [CHECK.search(nb.cells[i].source).group(1) for i in check_cells(nb)]


def _judged(part: str, *sources: str) -> str:
    """One part judged on the definitions of these cell sources, on its visible cases, as a check judges it."""
    return grading.judge(part, from_sources(list(sources)))


# -- the student version -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_student_version_replaces_solutions_and_keeps_the_checks(path):
    nb = nbformat.read(path, as_version=4)
    assert exercise_cells(nb) and check_cells(nb), "an assignment needs exercise cells and graded check cells"
    student = student_version(nb)
    text = "\n".join(c.source for c in student.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text
    for i in exercise_cells(nb):
        assert "raise NotImplementedError()" in student.cells[i].source
        assert student.cells[i].source.count("# YOUR CODE HERE") == nb.cells[i].source.count(BEGIN)
    for i in check_cells(nb):  # the checks stay as they are, with their grading metadata
        assert student.cells[i].metadata["nbgrader"]["grade"] is True
        assert student.cells[i].source == nb.cells[i].source
    nbformat.validate(student)


def test_every_graded_check_cell_is_one_visible_check_and_every_part_has_one():
    """A graded check cell is a comment and `check("aN.part", answer)`, nothing hidden and nothing run from a file:
    the part is judged from the submission's definitions, by name. Every part of grading.PARTS is graded by exactly
    one cell, and names the answer its part judges."""
    visible = re.compile(r'from teachspec\.course\.checks import check\n\ncheck\("(a\d+\.\w+)", (\w+)\)')
    graded = []
    for path in SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        for i in check_cells(nb):
            source = nb.cells[i].source
            code = "\n".join(line for line in source.splitlines() if not line.startswith("#")).strip()
            found = visible.fullmatch(code)
            assert found, source
            part, answer = found.groups()
            assert part.split(".")[0] == path.stem.split("_")[0] and answer == grading.PARTS[part].answer, source
            graded.append(part)
    assert sorted(graded) == sorted(grading.PARTS)


def test_the_student_copies_are_what_the_sources_give_today():
    """notebooks/assignments/ is the student version of each source, byte for byte: edit a source, then remake the
    copies with `python -c "from teachspec.course.student import refresh; refresh()"`."""
    assert [p.name for p in COPIES] == [p.name for p in SOLUTIONS] and len(SOLUTIONS) >= 6
    for source, copy in zip(SOLUTIONS, COPIES):
        assert copy.read_text(encoding="utf-8") == student_text(source), (
            f"{copy.relative_to(ROOT)} is not the student version of {source.relative_to(ROOT)}: run "
            f"python -c 'from teachspec.course.student import refresh; refresh()'")


@pytest.mark.parametrize("copy", COPIES, ids=lambda p: p.name)
def test_a_student_copy_holds_no_solution_and_no_hidden_test(copy):
    nb = nbformat.read(copy, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "run_path", "teachspec.course.grading"):
        assert marker not in text, marker
    source = nbformat.read(cs.SOURCES / copy.name, as_version=4)
    for line in cs.secret_lines(source):
        assert line not in text, line
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert check_cells(nb) == check_cells(source) and len(exercise_cells(source)) >= 1


def test_refresh_writes_the_copies_and_the_command_writes_one_outside_the_sources(tmp_path, capsys, monkeypatch):
    written = refresh(tmp_path / "copies")
    assert [p.name for p in written] == [p.name for p in SOLUTIONS]
    assert all(p.read_text() == (cs.STUDENT_COPIES / p.name).read_text() for p in written)
    out = tmp_path / "a1.ipynb"
    main([str(SOLUTIONS[0]), "-o", str(out)])
    assert "wrote" in capsys.readouterr().out
    assert "NotImplementedError" in out.read_text()
    monkeypatch.chdir(tmp_path)  # the default: student/<name>.ipynb here, never beside the package's sources
    main([str(SOLUTIONS[1])])
    assert (tmp_path / "student" / SOLUTIONS[1].name).is_file()
    assert not (cs.SOURCES / "student").exists()


def test_unbalanced_markers_are_refused():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1")])
    with pytest.raises(ValueError, match="never closed"):
        student_version(nb)


@pytest.mark.skipif(not (os.environ.get("TEACHSPEC_NOTEBOOK_PAIR") or (ROOT / "teachspec/models/tiny/draft").is_dir()),
                    reason="the bundled pair is not on disk; set TEACHSPEC_NOTEBOOK_PAIR=config")
@pytest.mark.parametrize("path", COPIES, ids=lambda p: p.name)
def test_student_notebook_fails_exactly_at_its_checks(path, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(cs.SOURCES / path.name, as_version=4)
    student = nbformat.read(path, as_version=4)  # the committed copy, as a student opens it
    NotebookClient(student, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    failed = [i for i, c in enumerate(student.cells) if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.outputs)]
    assert failed == check_cells(nb)
    for i in failed:
        error = next(o for o in student.cells[i].outputs if o.output_type == "error")
        assert error.ename == "CheckFailed" and "NotImplementedError" in error.evalue, error.evalue


# -- grading: every part earned by the solution, each classic bug loses its own part --------------------------------

def _submission(assignment: str, code: dict[str, str]) -> list[str]:
    """The code cells of a submission of `assignment`: its exercise cells are `code` (by grade_id), the others as
    the source has them."""
    nb = nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4)
    return [code[_nbgrader(c)["grade_id"]] if _nbgrader(c).get("solution") else c.source for c in nb.cells
            if c.cell_type == "code"]


def _graded(assignment: str, code: dict[str, str]) -> dict[str, str]:
    """Grade a submission as the graders do: the definitions of its code cells (`_submission`), every part its
    check cells name judged on the visible and the hidden cases. Returns the failed parts ("decisions", ...) and
    each one's message."""
    defs = from_sources(_submission(assignment, code))
    failed = {}
    for part in _parts(nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4)):
        try:
            grading.judge(part, defs, secret=SECRET)
        except CheckFailed as e:
            failed[part.split(".")[1]] = str(e)
    return failed


@pytest.mark.parametrize("assignment", sorted(cs.ASSIGNMENTS))
def test_the_solution_earns_every_part(assignment):
    assert _graded(assignment, cs.edited(assignment)) == {}


@pytest.mark.parametrize("assignment", sorted(cs.ASSIGNMENTS))
def test_a_blank_submission_earns_nothing_and_is_told_to_write_its_code(assignment):
    failed = _graded(assignment, cs.edited(assignment, "blank"))
    parts = {part.split(".")[1] for part in _parts(nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4))}
    assert set(failed) == parts
    assert all("NotImplementedError" in m for m in failed.values()), failed


BUG_CASES = [(a, bug) for a, bugs in cs.BUGS.items() for bug in bugs]
# Each of these grades a whole submission, a sandbox per part: minutes in all. `-m "not slow"` leaves them out.
SLOW = pytest.mark.slow


@SLOW
@pytest.mark.parametrize("assignment, bug", BUG_CASES, ids=[f"{a}: {b}" for a, b in BUG_CASES])
def test_each_classic_bug_loses_its_own_part_and_is_named(assignment, bug):
    """The bug fails the graded part(s) it breaks and no other; the feedback names the likely cause, in lines that
    fit nbgrader's 90 columns (with "CheckFailed: " in front of the first)."""
    _, _, lost, cause = cs.BUGS[assignment][bug]
    failed = _graded(assignment, cs.edited(assignment, bug))
    assert set(failed) == lost, {part: m[:300] for part, m in failed.items()}
    assert re.search(cause, " ".join(" ".join(failed.values()).split())), failed
    for message in failed.values():
        lines = f"CheckFailed: {message}".splitlines()
        assert max(len(line) for line in lines) <= 90, lines


@SLOW
@pytest.mark.parametrize("name", sorted(cs.GAMING))
def test_a_submission_that_games_the_checks_earns_nothing_for_what_it_fakes(name):
    """Delegating to teachspec's own implementation, replacing the check functions, replacing the reference the
    grader compares with, or rigging the random source and numpy: the part is lost all the same. A delegation is
    told that teachspec is not importable where its code is graded."""
    assignment, base, grade_id, code, must_lose = cs.GAMING[name]
    failed = _graded(assignment, cs.edited(assignment, base, extra=(grade_id, code)))
    assert must_lose <= set(failed), failed
    delegated = [m for m in failed.values() if "not importable" in " ".join(m.split())]
    if "delegates" in name or "wraps" in name or "hands" in name:
        assert delegated, failed


@pytest.mark.parametrize("reach", ['__import__("teachspec." + "theory", fromlist=["x"])',
                                   'importlib.import_module("teachspec." + "theory")'])
def test_the_sandbox_refuses_a_library_module_named_only_at_run_time(reach):
    """A module name built at run time names nothing the grader could read in the code; the sandbox refuses the
    import itself, and the part says why."""
    source = ("import importlib\n\n"
              "def choose_k(alpha, c, k_max=8):\n"
              f"    module = {reach}\n"
              "    return int(getattr(module, 'optimal' + '_k')(alpha, c, k_max))\n")
    with pytest.raises(CheckFailed, match="not importable"):
        _judged("a3.choose_k", source)


def _solution_module(assignment: str, folder: Path, monkeypatch) -> object:
    """The solved assignment as a module file in `folder`, imported: the definitions of its code cells but those
    that need a model (there is none here). Outside a notebook, `checks.code_of` reads an answer's code from the
    file that defines it: this one."""
    cells = [source for source in _submission(assignment, cs.edited(assignment))
             if not any(needs in source for needs in ("pick_pair", "Engine(", "engine."))]
    path = folder / f"solved_{assignment}.py"
    path.write_text(from_sources(cells).code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)  # where inspect finds a class's file
    spec.loader.exec_module(module)
    return module


def test_the_solutions_pass_the_whole_exercise_checks(tmp_path, monkeypatch, capsys):
    """Each exercise's check, called as a script or a test would call it: on the answer of a module, judged on
    the code of the module's file, every part of it."""
    a1, a2, a3, a4, a5, a6, a7, a8 = (_solution_module(a, tmp_path, monkeypatch) for a in sorted(cs.ASSIGNMENTS))
    checks.check_acceptance_rule(a1.speculative_step)
    checks.check_radix(a2.Radix)
    checks.check_choose_k(a3.choose_k)
    checks.check_remove(a4.remove)
    checks.check_rank_acceptance(a4.rank_acceptance)
    checks.check_multi_draft_step(a4.verify_node)
    checks.check_dfs_order(a5.dfs_order)
    checks.check_dynamic_tree(a6.grow)
    checks.check_tree_attention(a6.tree_attention)
    checks.check_followers(a7.followers)
    checks.check_longest_match(a7.longest_match)
    checks.check_suffix_guess(a7.guess)
    checks.check_match(a8.match)
    checks.check_imbalanced(a8.imbalanced)
    checks.check_route(a8.route)
    said = capsys.readouterr().out
    assert said.count("All checks passed.") == 14 and said.count("ok  a") == 25, said


# -- wrong implementations written other ways, and what the checks say -------------------------------------------

def _solved(assignment: str, *code: str) -> list[str]:
    """The code cells of the solved `assignment`, then `code`: a cell that redefines an answer the wrong way."""
    return [*_submission(assignment, cs.edited(assignment)), *code]


def test_resampling_from_p_instead_of_the_residual_fails():
    wrong = '''
from teachspec.sampling import sample

def speculative_step(p, q, draft, generator):
    for i, x in enumerate(draft.tolist()):
        u = torch.rand((), generator=generator, dtype=p.dtype)
        if not u < min(1.0, float(p[i, x] / q[i, x]) if q[i, x] > 0 else 0.0):
            return draft[:i].tolist() + [sample(p[i], generator).item()]  # the bug: p, not the residual
    return draft.tolist() + [sample(p[len(draft)], generator).item()]
'''
    assert _judged("a1.decisions", *_solved("a1", wrong)).startswith("ok")  # it decides as it should
    with pytest.raises(CheckFailed, match=r"(?s)After a rejection at position 0 .*That is p_0 itself"):
        _judged("a1.after_rejection", *_solved("a1", wrong))


def test_a_bonus_from_the_wrong_row_fails():
    wrong = '''
solved_step = speculative_step

def speculative_step(p, q, draft, generator):
    return solved_step(torch.cat([p[:-1], p[-2:-1]]), q, draft, generator)  # bonus from p_(k-1)
'''
    with pytest.raises(CheckFailed, match="bonus"):
        _judged("a1.bonus", *_solved("a1", wrong))


def test_evicting_a_locked_node_fails():
    wrong = '''
class Radix(Radix):
    def nodes(self):  # evict sees every node as unlocked
        out = super().nodes()
        for node in out:
            node.saved, node.locks = node.locks, 0
        return out
'''
    with pytest.raises(CheckFailed, match="evict removed a node with locks > 0"):
        _judged("a2.locks", *_solved("a2", wrong))


def test_evicting_most_recently_used_fails():
    wrong = '''
class Radix(Radix):
    def evict(self, n):
        leaves = [x for x in self.nodes() if x is not self.root and not x.children and x.locks == 0]
        leaves.sort(key=lambda x: -x.last_access)
        freed = 0
        for x in leaves:
            if freed >= n:
                break
            del x.parent.children[x.key[0]]
            self.size -= len(x.key)
            freed += len(x.key)
        return freed
'''
    with pytest.raises(CheckFailed, match="least recently used"):
        _judged("a2.lru", *_solved("a2", wrong))


def test_ignoring_the_draft_cost_fails():
    wrong = '''
def choose_k(alpha, c, k_max):  # the speedup without its cost: longer is always better
    return max(range(k_max + 1), key=lambda k: (sum(alpha**i for i in range(k + 1)), -k))
'''
    with pytest.raises(CheckFailed, match=r"expected k=\d+ .* got"):
        _judged("a3.choose_k", wrong)


def test_a_check_before_the_exercise_says_what_to_do():
    for part, answer in (("a1.decisions", "speculative_step"), ("a3.choose_k", "choose_k")):
        with pytest.raises(CheckFailed, match="(?s)NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            _judged(part, f"def {answer}(*args):\n    raise NotImplementedError()\n")
    todo = '''
class Radix:
    def insert(self, tokens):
        raise NotImplementedError()
'''
    with pytest.raises(CheckFailed, match="insert still raises NotImplementedError"):
        _judged("a2.match_insert", todo)


# -- assignment 4: the multi-draft rule ------------------------------------------------------------------------------

A4 = cs.ASSIGNMENTS["a4"]


def test_a4_the_stand_in_node_rule_is_the_librarys():
    """The stand-in for the notebook's node_rule agrees with teachspec's own verify_children: the same chance for
    every child tried and the same residual when all are rejected."""
    from teachspec.speculative.tree import TokenTree, verify_children

    g = torch.Generator().manual_seed(0)
    never = [1 - 2.0**-53] * 3  # uniforms that reject every child whose chance is below 1
    for _ in range(200):
        vocab = int(torch.randint(3, 6, (), generator=g))
        p = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
        q = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
        p[torch.rand(vocab, generator=g) < 0.3] = 0.0
        p, q = (p + (p.sum() == 0)) / (p + (p.sum() == 0)).sum(), q / q.sum()
        for kind in checks.KINDS:
            children = torch.multinomial(q, 3, replacement=kind == "independent", generator=g).tolist()
            tree = TokenTree((-1, 0, 0, 0), (0, *children))
            child, records, final = verify_children(p, q, tree, 0, never, kind)
            chances, mine = checks.reference_node_rule()(p, q, children, kind)
            assert chances[:len(records)] == pytest.approx([min(1.0, r.ratio) for r in records], abs=1e-12)
            if child is None:
                assert torch.allclose(mine, final, atol=1e-12)


def test_a4_the_grader_s_h_is_what_the_library_s_rule_gives():
    """h_r from the grader's reference against h_r counted over every sequence of children the draft can draw, each
    judged by teachspec's own verify_children."""
    from itertools import product

    from teachspec.course import grading
    from teachspec.speculative.tree import TokenTree, verify_children

    draws = grading.Draws(5)
    for _ in range(40):
        vocab, b = 3 + draws.below(2), 2 + draws.below(2)
        p, q = draws.distribution(vocab, draws.below(2)), draws.distribution(vocab, draws.below(2))
        P, Q = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
        for kind in checks.KINDS:
            reach, accepted = [0.0] * b, [0.0] * b
            drawn = b if kind == "independent" else min(b, sum(v > 0 for v in q))  # without replacement: q runs out
            for xs in product(range(vocab), repeat=drawn):
                weight, left = 1.0, list(q)
                for x in xs:  # the chance the draft draws these children, in this order
                    weight *= left[x] / sum(left) if sum(left) > 0 else 0.0
                    if kind == "without_replacement":
                        left[x] = 0.0
                if weight == 0:
                    continue
                tree = TokenTree((-1,) + (0,) * drawn, (0, *xs))
                _, records, _ = verify_children(P, Q, tree, 0, [1 - 2.0**-53] * drawn, kind)
                still = weight
                for r, record in enumerate(records):
                    chance = min(1.0, record.ratio)
                    reach[r] += still
                    accepted[r] += still * chance
                    still *= 1 - chance
            want = [a / n if n > 0 else 0.0 for a, n in zip(accepted, reach)]
            assert grading.ranks_of(p, q, b, kind) == pytest.approx(want, abs=1e-12), (p, q, b, kind)


def test_a4_sampling_the_last_token_from_p_fails():
    wrong = '''
def verify_node(p, q, children, kind, generator):
    chances, _ = node_rule(p, q, children, kind)
    for j, chance in enumerate(chances):
        if torch.rand((), generator=generator, dtype=torch.float64) < chance:
            return j, children[j]
    return None, sample(p, generator).item()  # the bug: p, not the last residual
'''
    with pytest.raises(CheckFailed, match=r"token leaving the node \(children independent"):
        _judged("a4.verify_node", *_solved("a4", wrong))


def test_a4_remove_in_place_or_without_renormalising_fails():
    in_place = '''
def remove(q, x):
    q[x] = 0.0
    return q / q.sum()
'''
    unnormalised = '''
def remove(q, x):
    kept = q.clone()
    kept[x] = 0.0
    return kept
'''
    with pytest.raises(CheckFailed, match="changed q in place"):
        _judged("a4.remove", in_place)
    with pytest.raises(CheckFailed, match=r"remove\(q=\[0.5, 0.3, 0.2\], x=0\): expected \[0, 0.6, 0.4\]"):
        _judged("a4.remove", unnormalised)


def test_a4_checks_before_the_exercise_say_what_to_do():
    for part, answer in (("a4.remove", "remove"), ("a4.ranks_independent", "rank_acceptance"),
                         ("a4.verify_node", "verify_node")):
        with pytest.raises(CheckFailed, match="(?s)NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            _judged(part, f"def {answer}(*args):\n    raise NotImplementedError()\n")


def test_a4_without_replacement_never_accepts_a_second_child_less_often():
    """Part 4's theorem, on many nodes: h_1 without replacement >= h_1 independent."""
    from teachspec.course import grading

    draws = grading.Draws(7)
    for _ in range(500):
        vocab = 2 + draws.below(5)
        p, q = draws.distribution(vocab, draws.below(vocab - 1)), draws.distribution(vocab, draws.below(vocab - 1))
        h_ind, h_wr = grading.ranks_of(p, q, 2, "independent"), grading.ranks_of(p, q, 2, "without_replacement")
        assert h_wr[1] >= h_ind[1] - 1e-12, (p, q, h_ind, h_wr)


# -- assignments 5 to 7: the grader's references against the library's -----------------------------------------------

def test_a5_the_grader_s_orders_and_rates_are_the_librarys():
    from teachspec import workloads
    from teachspec.course import grading
    from teachspec.radix import RadixCache
    from teachspec.radix.schedule import order, replay

    draws = grading.Draws(3)
    for _ in range(300):
        prompts = grading.queue(draws, 1 + draws.below(12))
        assert grading.dfs_of(prompts) == order(prompts, "dfs"), prompts
        assert grading.best_of(prompts) == pytest.approx(workloads.best_hit_rate(prompts), abs=1e-12)
        run_order = draws.shuffled(range(len(prompts)))
        assert grading.reuse_of(prompts, run_order) == replay(prompts, run_order, 10**6).cached
        held = [s + (1,) for s in grading.queue(draws, 1 + draws.below(3))]
        cache = RadixCache()
        for s in held:
            cache.insert(s, range(len(s)))
        assert grading.lpm_of(prompts, held) == order(prompts, "lpm", cache)


def test_a5_a_depth_first_order_reaches_the_best_hit_rate_with_a_cache_of_the_longest_request():
    """Part 5's theorem (SGLang's Theorem 3.1) on many queues, through the library's LRU simulation."""
    from teachspec.course import grading
    from teachspec.radix.schedule import replay

    draws = grading.Draws(4)
    for _ in range(200):
        prompts = grading.queue(draws, 1 + draws.below(12))
        longest = max(map(len, prompts))
        for run_order in (grading.dfs_of(prompts), grading.dfs_of(prompts, heaviest=False)):
            assert replay(prompts, run_order, longest).hit_rate == pytest.approx(grading.best_of(prompts))


def test_a6_the_grader_s_tree_is_the_engine_s_dynamic_tree_and_its_mask_the_engine_s():
    """grow_of against teachspec's grow_dynamic (greedy) on random draft tables, and the mask and positions against
    kv.tree_mask on random trees."""
    from teachspec import kv
    from teachspec.course import grading
    from teachspec.sampling import SamplingParams
    from teachspec.speculative.drafters import grow_dynamic

    draws = grading.Draws(6)
    for _ in range(200):
        vocab, width, depth, nodes = 3 + draws.below(3), 1 + draws.below(3), 1 + draws.below(4), 1 + draws.below(10)
        table, root = grading.draft_table(draws, vocab, depth), draws.below(9)

        def feed(parents, tokens, fed, table=table):
            return torch.stack([torch.tensor(table[grading.path_to(parents, tokens, i)], dtype=torch.float64).log()
                                for i in fed])

        grown = grow_dynamic(torch.tensor([table[()]], dtype=torch.float64).log(), root, depth,
                             SamplingParams(temperature=0.0), None, feed, width=width, nodes=nodes)
        assert (list(grown.tree.parents), list(grown.tree.tokens)) == grading.grow_of(table, root, width, depth, nodes)

    class Model:  # what tree_mask reads of a model: its device, dtype and config (no sliding window)
        device = torch.device("cpu")
        config = type("Config", (), {"get_text_config": lambda self, decoder=True: object()})()

        def parameters(self):
            yield torch.zeros(1)

    for _ in range(100):
        parents = grading.random_tree(draws, 2 + draws.below(10))
        n = len(parents)
        mask, positions = kv.tree_mask(Model(), 1, 0, tuple(parents), range(1, n))  # the root is the one context token
        allowed = (mask[0, 0] == 0)[1:].tolist()  # the nodes' rows; keys: the root, then nodes 1 .. n-1
        assert allowed == [[j in grading.ancestors(parents, i) for j in range(n)] for i in range(1, n)]
        assert (positions[1:] - positions[0]).tolist() == grading.depth_of(parents)[1:]


def test_a7_the_grader_s_counts_match_and_guess_are_the_suffix_tree_s():
    """followers_of and suffix_count against the counts of teachspec's SuffixTree, match_of against its match, and
    suffix_chain against its guess wherever that guess grows from the longest match (it tries every match length
    and keeps the best); then Part 5's example of what the chain gives up, and the tree that keeps it."""
    from teachspec.course import grading
    from teachspec.speculative.suffix_tree import SuffixTree

    draws, agreed = grading.Draws(8), 0
    for _ in range(300):
        sequences, context = grading.suffix_case(draws)
        depth, k = 2 + draws.below(7), 1 + draws.below(5)
        min_prob = grading.threshold(draws, sequences, context, depth, k) if draws.uniform() < 0.5 else 0.0
        tree = SuffixTree(depth)
        for i, s in enumerate(sequences):
            tree.add(i, s)
        for start in range(max(0, len(context) - depth), len(context)):  # each suffix the tree can hold
            pattern, node = context[start:], tree.root
            for t in pattern:
                node = node.children.get(t) if node is not None else None
            assert grading.suffix_count(sequences, pattern) == (node.count if node is not None else 0)
            if len(pattern) < depth:  # a path of depth tokens has no children
                assert grading.followers_of(sequences, pattern) == (
                    {t: child.count for t, child in node.children.items()} if node is not None else {})
        assert grading.match_of(sequences, context, depth) == tree.match(context).length, (sequences, context)
        guessed = tree.guess(context, (1,) * k, min_prob=min_prob)
        if guessed.match == tree.match(context).length:
            assert list(guessed.tokens[1:]) == grading.suffix_chain(sequences, context, depth, k, min_prob)
            agreed += 1
    assert agreed > 150, agreed
    # Part 5 (b): the chain's first two tokens are not the likeliest two; a tree with two children keeps those
    sequences = [[1, 2, 5], [1, 2, 6], [1, 2, 7], [1, 3, 8], [1, 3, 8]]
    tree = SuffixTree(8)
    for i, s in enumerate(sequences):
        tree.add(i, s)
    assert grading.suffix_chain(sequences, [1], 8, 2, 0.0) == [2, 5]
    branched = tree.guess([1], (2, 1), limit=3, min_prob=0.0)
    assert branched.tokens[1:] == (2, 3, 8) and branched.parents == (-1, 0, 0, 2)
    assert branched.prob[3] == pytest.approx(0.4)  # [3, 8], against the chain's [2, 5] at 0.2
    assert tree.guess([1], (1, 1), min_prob=0.0).prob[2] == pytest.approx(0.2)


# -- the notebooks an instructor grades from -----------------------------------------------------------------------

def test_the_otter_master_notebook_is_the_same_assignment_in_otters_format():
    """One test case per graded check, `test_<grade_id>` with its points, each decided by teachspec's plugin; the
    plugin's configuration (the course's secret, and which test grades which part) sits in the ASSIGNMENT CONFIG
    cell only, which otter assign keeps out of the student's notebook."""
    from teachspec.course.release import otter_master

    nb = nbformat.read(A4, as_version=4)
    secret = "5ec7e7" * 10
    master = otter_master(nb, A4.stem, secret)
    raw = [c.source.splitlines()[0] for c in master.cells if c.cell_type == "raw"]
    assert raw[0] == "# ASSIGNMENT CONFIG" == master.cells[0].source.splitlines()[0]
    assert raw.count("# BEGIN QUESTION") == len(exercise_cells(nb)) + 1  # the exercises and the written answer
    graded = [nb.cells[i] for i in check_cells(nb)]
    tests = [c.source for c in master.cells if c.cell_type == "code" and "# BEGIN TEST CONFIG" in c.source]
    assert [re.search(r"^def (\w+)\(", t, re.MULTILINE).group(1) for t in tests] == [
        f"test_{_nbgrader(c)['grade_id']}" for c in graded]
    assert [re.search(r"^points: (\S+)$", t, re.MULTILINE).group(1) for t in tests] == [
        str(_nbgrader(c)["points"]) for c in graded]
    config = yaml.safe_load(master.cells[0].source)
    plugin = next(p["teachspec.course.otter_plugin.Judge"] for p in config["plugins"]
                  if "teachspec.course.otter_plugin.Judge" in p)
    assert plugin["secret"] == secret
    names, question, n = [], None, 0  # Otter names a question's test cases "<question> - 1", "- 2", ...
    for cell in nb.cells:
        if cell.cell_type == "code" and _nbgrader(cell).get("solution"):
            question, n = _nbgrader(cell)["grade_id"], 0
        elif cell.cell_type == "code" and _nbgrader(cell).get("grade"):
            n += 1
            names.append(f"{question} - {n}")
    assert plugin["tests"] == dict(zip(names, _parts(nb)))
    assert [i for i, c in enumerate(master.cells) if secret in c.source] == [0]


def test_a8_the_grader_s_match_route_and_router_are_the_library_s():
    """sent_match against the router's ApproxTree (the characters matched, and the worker holding where the match
    ends), route_of against cache_aware's choice from the same tree and loads, and route_of as the simulator's
    router against cache_aware on the grader's workloads, route for route; on the visible workload made for it,
    cache-aware routing gains GAIN over round robin, and the two classic bugs the simulated part names route
    otherwise on the visible workloads."""
    from teachspec.course import grading
    from teachspec.routing.approx_tree import ApproxTree
    from teachspec.routing.policies import make_policy
    from teachspec.routing.simulate import simulate

    draws = grading.Draws(9)
    for _ in range(500):
        text, sent, _ = grading.sent_case(draws)
        tree = ApproxTree()
        for s, w in sent:
            tree.insert(s, w)
        found = tree.match(text)
        assert grading.sent_match(sent, text) == (found.chars, found.worker if found.chars else None), (sent, text)
    for text, sent, loads, t, a, r in grading.route_cases(draws, 500):
        policy = make_policy("cache_aware", len(loads), cache_threshold=t, balance_abs_threshold=a,
                             balance_rel_threshold=r)
        for s, w in sent:
            policy.tree.insert(s, w)
        assert policy.choose(text, "", loads, [True] * len(loads)) == grading.route_of(text, sent, loads, t, a, r)
    visible = [(8, 4, 24, 4, 0.3, 64, 1.5), (6, 3, 30, 8, 0.3, 1, 1.25)]
    for n, (tenants, replicas, kv_blocks, concurrency, *knobs) in enumerate(visible * 3):
        arrivals = grading.tenant_arrivals(draws, tenants, 64)
        where = dict(kv_blocks=kv_blocks, block_size=4, concurrency=concurrency)
        options = dict(zip(("cache_threshold", "balance_abs_threshold", "balance_rel_threshold"), knobs))
        want = simulate(arrivals, replicas, "cache_aware", **where, **options)
        policy = grading.route_policy(grading.route_of, replicas, tuple(knobs))
        assert simulate(arrivals, replicas, policy, **where).routes == want.routes
        if n % 2 == 0:
            assert want.hit_rate >= grading.GAIN * simulate(arrivals, replicas, "round_robin", **where).hit_rate
    for _, bug in grading.ROUTE_BUGS[1:]:  # round robin below the threshold, the loads ignored
        routed_otherwise = False
        for tenants, replicas, kv_blocks, concurrency, *knobs in visible:
            arrivals = grading.tenant_arrivals(grading.Draws(grading.seed_of("a8.simulated")), tenants, 64)
            where = dict(kv_blocks=kv_blocks, block_size=4, concurrency=concurrency)
            policy = grading.route_policy(lambda *case, bug=bug: grading.route_of(*case, **bug), replicas,
                                          tuple(knobs))
            routed_otherwise |= simulate(arrivals, replicas, policy, **where).routes != simulate(
                arrivals, replicas, grading.route_policy(grading.route_of, replicas, tuple(knobs)), **where).routes
        assert routed_otherwise, bug
