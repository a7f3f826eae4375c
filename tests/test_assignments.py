"""The assignments: the student copies a student browses are exactly what the sources give and hold no solution
and no hidden test, they fail exactly at their check cells until the exercises are written, every graded part is
earned by the solution, each classic bug loses its own part and nothing else with feedback that names the likely
cause, submissions that game the checks (delegating to teachspec, replacing the check functions, the reference or
the random source) earn nothing for what they fake, and every reference the grader compares with agrees with the
library's own implementation."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import nbformat
import pytest
import torch

import course_submissions as cs
from teachspec.course import checks
from teachspec.course.checks import CheckFailed
from teachspec.course.student import (BEGIN, BEGIN_HIDDEN, check_cells, exercise_cells, main, refresh, student_text,
                                      student_version)

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted(cs.SOURCES.glob("a*.ipynb"))
COPIES = sorted(cs.STUDENT_COPIES.glob("a*.ipynb"))


def _solution_namespace(path: Path) -> dict:
    """Run a solution notebook's code cells up to its first check, with no model (cells that need one skipped)."""
    ns: dict = {}
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or "pick_pair" in cell.source or "pair" in cell.source.split():
            continue
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        if "Engine(" in cell.source or "engine." in cell.source:
            continue
        exec(compile(cell.source, str(path), "exec"), ns)  # noqa: S102 -- the notebook's own code
    return ns


# -- the student version -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_student_version_replaces_solutions_and_drops_hidden_tests(path):
    nb = nbformat.read(path, as_version=4)
    assert exercise_cells(nb) and check_cells(nb), "an assignment needs exercise cells and graded check cells"
    assert any(BEGIN_HIDDEN in nb.cells[i].source for i in check_cells(nb)), "no hidden tests"
    student = student_version(nb)
    text = "\n".join(c.source for c in student.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text
    for i in exercise_cells(nb):
        assert "raise NotImplementedError()" in student.cells[i].source
        assert student.cells[i].source.count("# YOUR CODE HERE") == nb.cells[i].source.count(BEGIN)
    for i in check_cells(nb):  # the visible checks stay, with their grading metadata
        assert student.cells[i].metadata["nbgrader"]["grade"] is True
        assert student.cells[i].source.strip()
    nbformat.validate(student)


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

def _given(cell) -> bool:
    """A code cell that is neither graded nor needs a model (it picks one, or runs the engine): run when a
    submission is graded here."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and not meta.get("grade") and not any(
        needs in cell.source for needs in ("pick_pair", "Engine(", "engine.")) and "pair" not in cell.source.split()


def _graded(assignment: str, code: dict[str, str]) -> dict[str, str]:
    """Run a submission as the autograder does, but in this process and without the model cells: its exercise
    cells are `code` (by grade_id). Returns the failed parts and each one's message."""
    nb = nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4)
    ns: dict = {"__name__": "__main__"}
    failed = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if _given(cell):
            source = code[meta["grade_id"]] if meta.get("solution") else cell.source
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<{assignment}>", "exec"), ns)  # noqa: S102 -- the notebook's own code
        elif cell.cell_type == "code" and meta.get("grade"):
            part = re.search(rf'check\("{assignment}\.(\w+)"', cell.source).group(1)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, f"<{assignment} {meta['grade_id']}>", "exec"), ns)  # noqa: S102
            except AssertionError as e:
                failed[part] = str(e)
    return failed


@contextlib.contextmanager
def _restored(*modules):
    """Whatever a gaming submission replaces in these modules is put back afterwards."""
    saved = [(m, dict(vars(m))) for m in modules]
    try:
        yield
    finally:
        for m, d in saved:
            for name in set(vars(m)) - set(d):
                delattr(m, name)
            for name, value in d.items():
                setattr(m, name, value)


@pytest.mark.parametrize("assignment", sorted(cs.ASSIGNMENTS))
def test_the_solution_earns_every_part(assignment):
    assert _graded(assignment, cs.edited(assignment)) == {}


@pytest.mark.parametrize("assignment", sorted(cs.ASSIGNMENTS))
def test_a_blank_submission_earns_nothing_and_is_told_to_write_its_code(assignment):
    failed = _graded(assignment, cs.edited(assignment, "blank"))
    parts = {re.search(rf'check\("{assignment}\.(\w+)"', c.source).group(1) for c in
             nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4).cells if c.get("metadata", {}).get(
                 "nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert set(failed) == parts
    assert all("NotImplementedError" in m for m in failed.values()), failed


BUG_CASES = [(a, bug) for a, bugs in cs.BUGS.items() for bug in bugs]


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


@pytest.mark.parametrize("name", sorted(cs.GAMING))
def test_a_submission_that_games_the_checks_earns_nothing_for_what_it_fakes(name):
    """Delegating to teachspec's own implementation, replacing the check functions, replacing the reference the
    old hidden tests compared with, or rigging the random source and numpy: the part is lost all the same."""
    import random

    import numpy
    import teachspec.radix
    import teachspec.radix.tree
    import teachspec.theory

    assignment, base, grade_id, code, must_lose = cs.GAMING[name]
    with _restored(checks, teachspec.theory, teachspec.radix, teachspec.radix.tree, numpy, random, torch):
        failed = _graded(assignment, cs.edited(assignment, base, extra=(grade_id, code)))
    assert must_lose <= set(failed), failed
    delegated = [m for m in failed.values() if "teachspec's own answer" in " ".join(m.split())]
    if "delegates" in name or "wraps" in name or "hands" in name:
        assert delegated, failed


def test_the_grader_refuses_a_library_function_reached_only_at_run_time():
    """A name built at run time escapes the walk over what the answer names; the library refuses the call."""
    from teachspec.course import grading

    def choose_k(alpha, c, k_max=8):
        module = __import__("teachspec." + "theory", fromlist=["x"])
        return int(getattr(module, "optimal" + "_k")(alpha, c, k_max))

    assert grading.delegates_to(choose_k, grading.PARTS["a3.choose_k"]) is None
    with pytest.raises(CheckFailed, match="teachspec's own answer"):
        grading.grade("a3.choose_k", choose_k)
    from teachspec import theory
    assert theory.optimal_k(0.8, 0.05, 8) == grading.best_k(0.8, 0.05, 8)  # put back afterwards


def test_the_hidden_tests_read_the_grader_afresh():
    """A graded cell's hidden part loads grading.py from its file, not the module the notebook can reach."""
    for path in cs.ASSIGNMENTS.values():
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade") and cell.cell_type == "code":
                hidden = cs.hidden_code(cell.source)
                assert 'run_path(find_spec("teachspec.course.grading").origin)["grade"]' in hidden, hidden
                assert "teachspec.course.checks" not in hidden


def test_the_solutions_pass_the_whole_exercise_checks():
    a1, a2, a3, a4, a5, a6 = (_solution_namespace(p) for p in SOLUTIONS)
    checks.check_acceptance_rule(a1["speculative_step"])
    checks.check_radix(a2["Radix"])
    checks.check_choose_k(a3["choose_k"])
    checks.check_remove(a4["remove"])
    checks.check_rank_acceptance(a4["rank_acceptance"])
    checks.check_multi_draft_step(a4["verify_node"])
    checks.check_dfs_order(a5["dfs_order"])
    checks.check_dynamic_tree(a6["grow"])
    checks.check_tree_attention(a6["tree_attention"])


# -- wrong implementations written other ways, and what the checks say -------------------------------------------------

def test_resampling_from_p_instead_of_the_residual_fails():
    from teachspec.sampling import sample

    def wrong(p, q, draft, generator):
        for i, x in enumerate(draft.tolist()):
            u = torch.rand((), generator=generator, dtype=p.dtype)
            if not u < min(1.0, float(p[i, x] / q[i, x]) if q[i, x] > 0 else 0.0):
                return draft[:i].tolist() + [sample(p[i], generator).item()]  # the bug: p, not the residual
        return draft.tolist() + [sample(p[len(draft)], generator).item()]

    with pytest.raises(CheckFailed, match=r"(?s)After a rejection at position 0 .*That is p_0 itself"):
        checks.check_acceptance_rule(wrong)


def test_a_bonus_from_the_wrong_row_fails():
    ns = _solution_namespace(SOLUTIONS[0])

    def wrong(p, q, draft, generator):
        return ns["speculative_step"](torch.cat([p[:-1], p[-2:-1]]), q, draft, generator)  # bonus from p_(k-1)

    with pytest.raises(CheckFailed, match="bonus"):
        checks.check_acceptance_rule(wrong)


def test_evicting_a_locked_node_fails():
    Radix = _solution_namespace(SOLUTIONS[1])["Radix"]

    class IgnoresLocks(Radix):
        def nodes(self):  # evict sees every node as unlocked
            out = super().nodes()
            for node in out:
                node.saved, node.locks = node.locks, 0
            return out

    with pytest.raises(CheckFailed, match="evict removed a node with locks > 0"):
        checks.check_radix(IgnoresLocks)


def test_evicting_most_recently_used_fails():
    Radix = _solution_namespace(SOLUTIONS[1])["Radix"]

    class MostRecent(Radix):
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

    with pytest.raises(CheckFailed, match="least recently used"):
        checks.check_radix(MostRecent)


def test_ignoring_the_draft_cost_fails():
    def choose_k(alpha, c, k_max):  # the speedup without its cost: longer is always better
        return max(range(k_max + 1), key=lambda k: (sum(alpha**i for i in range(k + 1)), -k))

    with pytest.raises(CheckFailed, match=r"expected k=\d+ .* got"):
        checks.check_choose_k(choose_k)


def test_a_check_before_the_exercise_says_what_to_do():
    def todo(*args):
        raise NotImplementedError()

    for check, fn in ((checks.check_acceptance_rule, todo), (checks.check_choose_k, todo)):
        with pytest.raises(CheckFailed, match="(?s)NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            check(fn)

    class Todo:
        def insert(self, tokens):
            raise NotImplementedError()

    with pytest.raises(CheckFailed, match="insert still raises NotImplementedError"):
        checks.check_radix(Todo)


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
    from teachspec.sampling import sample

    ns = _solution_namespace(A4)

    def wrong(p, q, children, kind, generator):
        chances, _ = ns["node_rule"](p, q, children, kind)
        for j, chance in enumerate(chances):
            if torch.rand((), generator=generator, dtype=torch.float64) < chance:
                return j, children[j]
        return None, sample(p, generator).item()  # the bug: p, not the last residual

    with pytest.raises(CheckFailed, match=r"token leaving the node \(children independent"):
        checks.check_multi_draft_step(wrong)


def test_a4_remove_in_place_or_without_renormalising_fails():
    def in_place(q, x):
        q[x] = 0.0
        return q / q.sum()

    def unnormalised(q, x):
        kept = q.clone()
        kept[x] = 0.0
        return kept

    with pytest.raises(CheckFailed, match="changed q in place"):
        checks.check_remove(in_place)
    with pytest.raises(CheckFailed, match=r"remove\(q=\[0.5, 0.3, 0.2\], x=0\): expected \[0, 0.6, 0.4\]"):
        checks.check_remove(unnormalised)


def test_a4_checks_before_the_exercise_say_what_to_do():
    def todo(*args):
        raise NotImplementedError()

    for check in (checks.check_remove, checks.check_rank_acceptance, checks.check_multi_draft_step):
        with pytest.raises(CheckFailed, match="(?s)NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            check(todo)


def test_a4_without_replacement_never_accepts_a_second_child_less_often():
    """Part 4's theorem, on many nodes: h_1 without replacement >= h_1 independent."""
    from teachspec.course import grading

    draws = grading.Draws(7)
    for _ in range(500):
        vocab = 2 + draws.below(5)
        p, q = draws.distribution(vocab, draws.below(vocab - 1)), draws.distribution(vocab, draws.below(vocab - 1))
        h_ind, h_wr = grading.ranks_of(p, q, 2, "independent"), grading.ranks_of(p, q, 2, "without_replacement")
        assert h_wr[1] >= h_ind[1] - 1e-12, (p, q, h_ind, h_wr)


# -- assignments 5 and 6: the grader's references against the library's ----------------------------------------------

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


# -- the copies an instructor grades from --------------------------------------------------------------------------

def test_the_grading_copy_puts_the_checks_back_and_keeps_the_students_code(tmp_path):
    from teachspec.course.release import grading_copy

    student = student_version(nbformat.read(A4, as_version=4))
    submission = cs.fill(student, cs.edited("a4", "p' never updated"), cs.exercises("a4"))
    (tmp_path / "alice").mkdir()
    nbformat.write(submission, tmp_path / "alice" / A4.name)
    out = grading_copy(tmp_path / "alice" / A4.name)
    graded = nbformat.read(out, as_version=4)
    text = "\n".join(c.source for c in graded.cells)
    assert text.count("### BEGIN HIDDEN TESTS") == len(check_cells(nbformat.read(A4, as_version=4)))
    assert "min(1.0, float(p[y] / drawn_from[y]))" in text and "### BEGIN SOLUTION" not in text  # her bug, not ours


def test_the_otter_master_notebook_is_the_same_assignment_in_otters_format():
    from teachspec.course.release import otter_master

    nb = nbformat.read(A4, as_version=4)
    master = otter_master(nb, A4.stem)
    raw = [c.source.splitlines()[0] for c in master.cells if c.cell_type == "raw"]
    assert raw[0] == "# ASSIGNMENT CONFIG"
    assert raw.count("# BEGIN QUESTION") == len(exercise_cells(nb)) + 1  # the exercises and the written answer
    tests = [c.source for c in master.cells if c.cell_type == "code" and "# BEGIN TEST CONFIG" in c.source]
    assert len(tests) == 2 * len(check_cells(nb))  # a visible and a hidden test case per graded check
    assert all("hidden: true" in t for t in tests[1::2]) and all("points: 0" in t for t in tests[::2])
    assert "def test_check_multi_draft_step_hidden(verify_node):" in "\n".join(tests)
