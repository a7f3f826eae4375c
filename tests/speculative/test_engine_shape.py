"""The engine reads as its algorithm: one short step per request, the draft model's rollback visible and checked,
and no import cycle anywhere in the package."""

import ast
from pathlib import Path

import torch

from helpers.models import assert_draft_holds_committed_tokens
from teachspec import Engine, load_pair
from teachspec.request import Request
from teachspec.sampling import SamplingParams
from teachspec.speculative.policies import make_policy
from teachspec.stopping import StopRule

PACKAGE = Path(__file__).parents[2] / "teachspec"
ENTRY_POINTS = {"__init__", "generate", "serve"}  # public signatures that stay as they were


def functions(path: Path):
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_every_function_of_the_engine_is_short_and_takes_few_parameters():
    for f in functions(PACKAGE / "engine.py"):
        lines = f.end_lineno - f.lineno + 1
        params = [a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs if a.arg != "self"]
        assert lines <= 40, f"{f.name} runs {lines} lines"
        assert f.name in ENTRY_POINTS or len(params) <= 5, f"{f.name} takes {len(params)} parameters"


def test_the_step_is_the_first_thing_the_engine_class_defines_after_init():
    engine = next(n for n in ast.parse((PACKAGE / "engine.py").read_text()).body
                  if isinstance(n, ast.ClassDef) and n.name == "Engine")
    methods = [n.name for n in engine.body if isinstance(n, ast.FunctionDef)]
    assert methods[:2] == ["__init__", "step"]


def module_imports(path: Path) -> set[str]:
    """The teachspec modules a module imports anywhere: at the top, and inside its functions (an import deferred to
    a call is still a dependency, and a cycle through one is a cycle)."""
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            parts = [node.module] if node.module else []
            base = node.module if node.level == 0 else ".".join(name.split(".")[:-node.level] + parts)
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("teachspec")} - {name}


def test_imports_inside_functions_are_counted():
    found = module_imports(PACKAGE / "demo.py")
    assert "teachspec.engine" in found  # top level
    assert "teachspec.serving" in module_imports(PACKAGE / "cli.py")  # inside cmd_serve only


def test_no_import_cycle_in_the_package():
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in module_imports(p) if i in modules} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            # a package's __init__ is loaded before its modules: importing a.b through a is not a cycle back to a
            if m.startswith(n + "."):
                continue
            assert state.get(n) != 1, f"import cycle: {' -> '.join(path + [n])}"
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


@torch.inference_mode()
def test_after_every_step_the_draft_models_cache_is_a_fresh_prefill_of_the_committed_text():
    """The step rolls the draft model back (a rejected guess and the guesses after it leave its cache): its keys
    and values then equal the draft's own prefill of the committed tokens it holds."""
    pair = load_pair("tiny")
    engine = Engine(pair, cache_tokens=0)
    prompt = pair.encode("def parse(path):\n    with open(path) as f:")
    r = Request(engine.next_id(), prompt, 40, SamplingParams(temperature=1.0), StopRule(), engine.drafter("model"),
                make_policy(4), torch.Generator().manual_seed(0))
    rejections = 0
    with engine.running(r):
        while not r.done:
            before = r.stats.rejected
            engine.step(r)
            rejections += r.stats.rejected > before
            assert_draft_holds_committed_tokens(r, pair)
    assert rejections >= 3  # the rollback after a rejection was exercised, not only after full acceptance


def drafter_lists(path: Path) -> list[int]:
    """The lines of `path` holding a list, tuple, set or dict whose items (or keys) name two or more drafters."""
    from teachspec.speculate import DRAFTERS

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, (ast.List, ast.Tuple,
                                                                                               ast.Set)) else []
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in DRAFTERS}
        if len(named) >= 2:
            found.append(node.lineno)
    return found


def test_the_registry_is_the_only_list_of_drafters():
    """A new drafter is one class and one registry line: no other module of the package lists drafters by name
    (the engine, the command line, programs, serving and the k policies read teachspec/speculate.py)."""
    lists = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "speculate.py" and (lines := drafter_lists(path))}
    assert lists == {}


def test_the_registry_check_finds_a_list_of_drafters(tmp_path):
    """The structure test above can fail: a module with its own list of drafter names is found."""
    module = tmp_path / "listing.py"
    module.write_text('SPECULATE = ("model", "ngram", "none")\nSTART = {"eagle": 5, "oracle": 8}\nONE = ["model"]\n')
    assert drafter_lists(module) == [1, 2]


def test_a_tree_step_has_no_switch_on_the_type_of_its_tree():
    """tree= becomes a tree policy (fixed, dynamic, adaptive), as k becomes a k policy: the step asks it for a
    shape and never looks at what kind of tree it was given."""
    source = ast.get_source_segment((PACKAGE / "engine.py").read_text(), next(
        f for f in functions(PACKAGE / "engine.py") if f.name == "tree_step"))
    assert "isinstance" not in source and '"dynamic"' not in source and "next_shape()" in source
