"""The grading sandbox, on real child interpreters: values cross by value (and objects as proxies), teachspec is
not importable over there but for what an exercise is offered, teachspec's files, the course's folder and
everything outside the scratch folder are out of reach, sockets, processes and signals are refused, a call that
does not return, an exit or a limit ends as a verdict, and a line that fails at definition leaves its name bound to
its failure. Also what of a notebook's cells is run there at all (`definitions.from_sources`).

Each `Sandbox` starts a child interpreter that imports torch (about 2 s), so each test starts one, and asks it
many things."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import teachspec
from teachspec.course import grading
from teachspec.course.definitions import from_sources
from teachspec.course.sandbox import Died, Limits, Raised, Remote, Sandbox, TimedOut

OWN_FILE = str(Path(teachspec.__file__).resolve().parent / "theory.py")  # one of teachspec's own sources


def raised(fn, *args) -> Raised:
    """What calling `fn` over there raised."""
    with pytest.raises(Raised) as e:
        fn(*args)
    return e.value


VALUES = """
import os
import torch

def double(x):
    return 2 * x

def pair(a, b):
    return (b, a), [a, b]

def keyed():
    return {(1, 2): "one two", (3,): ("three",)}

def tensors():
    return torch.arange(3), torch.tensor([0.5, 1.5], dtype=torch.float64), torch.tensor([True, False])

def bump(t):
    t.add_(1)

class Counter:
    def __init__(self):
        self.n = 0

    def add(self, k):
        self.n += k
        return self.n

    def __iter__(self):
        return iter(range(self.n))

counter = Counter()

def the_counter():
    return counter

class Trap:
    def __reduce__(self):  # unpickling this would run a shell command
        return (os.system, ("touch unpickled",))

def trap():
    return Trap()

def leave():
    raise SystemExit(1)

def interrupt():
    raise KeyboardInterrupt
"""


def test_values_cross_by_value_and_objects_as_the_same_proxy():
    with Sandbox(VALUES) as box:
        assert box.answer("double")(21) == 42 and box.answer("double")("ab") == "abab"
        assert box.answer("no_such_name") is None
        swapped, listed = box.answer("pair")(1, "b")
        assert swapped == ("b", 1) and type(swapped) is tuple and listed == [1, "b"]
        assert box.answer("keyed")() == {(1, 2): "one two", (3,): ("three",)}
        longs, doubles, flags = box.answer("tensors")()
        assert isinstance(longs, torch.Tensor) and longs.dtype == torch.int64 and longs.tolist() == [0, 1, 2]
        assert doubles.dtype == torch.float64 and doubles.tolist() == [0.5, 1.5]
        assert flags.dtype == torch.bool and flags.tolist() == [True, False]

        t = torch.zeros(3, dtype=torch.float64)
        assert box.answer("bump")(t) is None
        assert t.tolist() == [1.0, 1.0, 1.0]  # changed in place over there: changed here too

        counter = box.answer("the_counter")()
        assert isinstance(counter, Remote) and counter is box.answer("the_counter")()
        assert counter.add(2) == 2 and counter.add(3) == 5 and counter.n == 5

        trap = box.answer("trap")()
        assert type(trap) is Remote  # a reference to it, never its pickle
        assert not Path("unpickled").exists()

        for name, kind in (("leave", "SystemExit"), ("interrupt", "KeyboardInterrupt")):
            assert raised(box.answer(name)).kinds[0] == kind
        assert box.answer("double")(1) == 2  # and the child answers on
        assert [x for x in counter] == [0, 1, 2, 3, 4]
        assert list(counter) == [0, 1, 2, 3, 4] and len(counter) == 5


IMPORTS = """
import importlib

def plain():
    import teachspec

def named():
    from teachspec.theory import speedup

def by_importlib():
    importlib.import_module("teachspec.radix")

def by_dunder():
    __import__("teachspec.course.grading")
"""


def test_teachspec_is_not_importable_over_there():
    with Sandbox(IMPORTS) as box:
        for name in ("plain", "named", "by_dunder", "by_importlib"):
            e = raised(box.answer(name))
            assert e.kinds[0] == "ImportError" and "not importable" in e.message, (name, e)


OFFERED = """
import torch

def draw(probs, seed):
    from teachspec.sampling import sample
    return sample(probs, torch.Generator().manual_seed(seed))

def params():
    from teachspec.sampling import SamplingParams

def theory():
    import teachspec.theory
"""


def test_an_offered_module_holds_what_it_offers_and_nothing_else():
    with Sandbox(OFFERED, grading.offers("a1.decisions")) as box:
        assert box.answer("draw")(torch.tensor([0.0, 1.0, 0.0]), 7) == 1  # the only token with any mass
        assert raised(box.answer("params")).kinds[0] == "ImportError"
        e = raised(box.answer("theory"))
        assert e.kinds[0] == "ImportError" and "not importable" in e.message and "teachspec.sampling" in e.message


FILES = """
import importlib.util
import pathlib

def by_open(path):
    return open(path).read()

def by_pathlib(path):
    return pathlib.Path(path).read_text()

def by_spec(path):
    spec = importlib.util.spec_from_file_location("theory", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))

def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return open(path).read()
"""


def test_files_out_of_reach_are_refused_and_the_scratch_folder_is_writable(tmp_path):
    course, elsewhere = tmp_path / "course", tmp_path / "elsewhere"
    course.mkdir()
    elsewhere.mkdir()
    (course / "teachspec_grading.json").write_text('{"secret": "00"}')
    with Sandbox(FILES, denied=(str(course),)) as box:
        for name in ("by_open", "by_pathlib", "by_spec"):
            assert raised(box.answer(name), OWN_FILE).kinds[0] == "PermissionError", name
        assert raised(box.answer("by_open"), str(course / "teachspec_grading.json")).kinds[0] == "PermissionError"
        assert raised(box.answer("write"), str(elsewhere / "out.txt"), "x").kinds[0] == "PermissionError"
        assert box.answer("write")("notes.txt", "mine") == "mine"  # the working directory is the scratch folder
        assert (Path(box.scratch) / "notes.txt").read_text() == "mine"
    assert not (elsewhere / "out.txt").exists()


CHANGES = """
import os

def rename(source, target):
    os.rename(source, target)
    return open(target).read()

def remove(path):
    os.remove(path)

def truncate(path):
    os.truncate(path, 0)

def mkdir(path):
    os.mkdir(path)

def read_below(folder, name):
    d = os.open(folder, os.O_RDONLY)
    return os.read(os.open(name, os.O_RDONLY, dir_fd=d), 100).decode()
"""


def test_files_outside_the_scratch_folder_cannot_be_moved_removed_or_reached_through_a_folder(tmp_path):
    course, elsewhere = tmp_path / "course", tmp_path / "elsewhere"
    course.mkdir()
    elsewhere.mkdir()
    secret, kept = course / "teachspec_grading.json", elsewhere / "kept.txt"
    secret.write_text('{"secret": "00"}')
    kept.write_text("kept")
    torch_folder = Path(torch.__file__).resolve().parent  # denied in a readable folder, as an installed teachspec is
    with Sandbox(CHANGES, denied=(str(course), str(torch_folder))) as box:
        assert raised(box.answer("rename"), str(secret), "moved.json").kinds[0] == "PermissionError"
        for name in ("remove", "truncate"):
            assert raised(box.answer(name), str(kept)).kinds[0] == "PermissionError", name
        assert raised(box.answer("mkdir"), str(elsewhere / "made")).kinds[0] == "PermissionError"
        assert raised(box.answer("read_below"), str(torch_folder.parent), "torch/__init__.py").kinds[0] == \
            "PermissionError"
    assert secret.read_text() == '{"secret": "00"}' and kept.read_text() == "kept"
    assert not (elsewhere / "made").exists()


REFUSED = """
import os
import socket
import subprocess

def connect():
    socket.socket().connect(("127.0.0.1", 9))

def run():
    subprocess.run(["true"])

def system():
    os.system("true")

def signal():
    os.kill(os.getppid(), 0)

def spawn():  # past subprocess's audit event: straight to _posixsubprocess, which torch has loaded already
    from multiprocessing.util import spawnv_passfds
    return spawnv_passfds(b"/bin/true", [b"/bin/true"], ())
"""


def test_sockets_processes_and_signals_are_refused():
    with Sandbox(REFUSED) as box:
        for name in ("connect", "run", "system", "signal"):
            assert raised(box.answer(name)).kinds[0] == "PermissionError", name
        assert {"PermissionError", "ImportError"} & set(raised(box.answer("spawn")).kinds)


def test_a_call_that_does_not_return_times_out():
    with Sandbox("def spin():\n    while True:\n        pass\n", limits=Limits(seconds=2)) as box:
        started = time.monotonic()
        with pytest.raises(TimedOut) as e:
            box.answer("spin")()
        assert e.value.seconds == 2 and time.monotonic() - started < 20


def test_an_exit_of_the_interpreter_is_died_with_its_code():
    with Sandbox("import os\n\ndef leave():\n    os._exit(3)\n") as box:
        with pytest.raises(Died) as e:
            box.answer("leave")()
    assert "exit code 3" in e.value.why


def test_output_past_the_file_limit_is_cut_off():
    """Python ignores SIGXFSZ, so the write past the limit fails over there (EFBIG) and the output stays capped."""
    with Sandbox("def shout():\n    print('x' * (20 * 2**20), flush=True)\n") as box:
        e = raised(box.answer("shout"))
        assert "OSError" in e.kinds and "File too large" in e.message
        assert os.path.getsize(box.output.name) <= Limits().file_bytes


def test_memory_past_the_limit_is_a_memory_error():
    with Sandbox("def hoard():\n    return len(bytearray(8 * 2**30))\n\ndef small():\n    return 1\n",
                 limits=Limits(memory_bytes=3 * 2**30)) as box:
        assert raised(box.answer("hoard")).kinds[0] == "MemoryError"
        assert box.answer("small")() == 1


def test_a_line_that_fails_at_definition_binds_its_failure_not_an_earlier_answer():
    code = ("def best_hit_rate(prompts):\n    return 1.0\n\n"   # a good definition, then one handed to teachspec
            "from teachspec import workloads\nbest_hit_rate = workloads.best_hit_rate\n")
    with Sandbox(code) as box:
        for name in ("best_hit_rate", "workloads"):
            e = raised(box.answer(name), [[1, 2]])
            assert e.kinds[0] == "ImportError" and "not importable" in e.message, name
        assert [note.split(":")[0] for note in box.notes] == ["line 4", "line 5"]


def test_from_sources_keeps_the_definitions_and_drops_what_computes():
    kept = ("import math\nfrom os import path as p\nEPS = 1e-9\nroot = lambda x: math.sqrt(x) + EPS\n"
            "class A:\n    size = 2\n\ndef g():\n    return A.size\n")
    mixed = ("print('hello')\nx = g()\nlimit: int = 3\nfor i in range(3):\n    pass\n%timeit g()\n!ls\n"
             "if True:\n    y = 1\n")
    out = from_sources([kept, mixed, "def broken(:\n    pass\n"])
    for line in kept.splitlines() + ["limit: int = 3"]:
        assert line in out.code, line
    for word in ("print", "x = g()", "for i", "timeit", "!ls", "y = 1"):
        assert word not in out.code, word
    assert len(out.notes) == 1 and out.notes[0].startswith("code cell 3 does not parse")
    names: dict = {}
    exec(out.code, names)  # what is kept runs on its own
    assert names["g"]() == 2 and names["root"](4.0) == pytest.approx(2.0) and names["limit"] == 3


def test_a_spare_child_waits_for_its_setup_then_serves_and_ends_itself_if_nobody_takes_it(monkeypatch):
    """Each part takes the spare child started while the last part was judged (torch already imported) and starts
    the next one; a spare nobody takes ends itself after SPARE_WAITS_S, and the next part starts a fresh child."""
    from teachspec.course import sandbox

    monkeypatch.setattr(sandbox, "SPARE_WAITS_S", 3)
    sandbox._discard_spare()
    with Sandbox(VALUES) as box:
        first = box.process.pid
        assert box.answer("double")(4) == 8
        (spare,) = sandbox._spare
        assert spare.process.poll() is None and spare.process.pid != first
    with Sandbox(VALUES) as box:
        assert box.process.pid == spare.process.pid, "the spare was not the next part's child"
        assert box.answer("double")(5) == 10
    (idle,) = sandbox._spare
    assert idle.process.wait(timeout=60) == 0, "a spare nobody took did not end itself"
    with Sandbox(VALUES) as box:
        assert box.process.pid != idle.process.pid and box.answer("double")(6) == 12
    sandbox._discard_spare()
    assert not Path(idle.scratch).exists() and not sandbox._spare
