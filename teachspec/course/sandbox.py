"""The grading sandbox: the student's code in a child interpreter, the grader's judgement in this one.

    with Sandbox(definitions) as box:          # definitions: the code of the exercise cells (course.definitions)
        step = box.answer("speculative_step")  # a proxy: calling it calls the student's function over there
        tokens = step(p, q, draft, generator)  # arguments go over by value, the answer comes back by value

The child (`sandbox_child.py`, started by path so it imports nothing of teachspec) shares no memory with this
process: nothing the student's code does there, or did in the notebook's kernel, can replace the judge, the cases
or the expected answers here. It runs under limits (CPU seconds, memory, file size, a scratch folder as its working
directory, its output to a file read at most to its last lines), behind an audit hook that refuses teachspec's
modules (but the narrow copies an exercise is `offers`ed), files outside what the interpreter needs, sockets and
new processes. This side keeps the wall clock: a call that does not come back by the deadline kills the child and
becomes `TimedOut`, a child that ends (os._exit, a signal, a limit) becomes `Died`, and whatever the code raised,
SystemExit and KeyboardInterrupt included, becomes `Raised`.

Values cross as JSON, never pickle: unpickling the child's bytes here would run the child's code in the grader.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

CHILD = Path(__file__).with_name("sandbox_child.py")
MAX_REPLY = 16 * 2**20  # bytes of one answer: more is the child's doing, not an answer


@dataclass(frozen=True)
class Limits:
    seconds: float = 30.0           # wall clock for the student's code of one part: definitions and every call
    start_s: float = 120.0          # starting the child and importing torch, apart (slow on a busy machine)
    cpu_s: int = 60                 # the kernel's backstop for the child, in CPU seconds
    memory_bytes: int = 6 * 2**30   # address space; torch alone maps about 1.5 GiB
    file_bytes: int = 8 * 2**20     # any file the child writes, its output included


class Raised(Exception):
    """The student's code raised: `kinds` is the exception's class and its bases, by name."""

    def __init__(self, kinds: list[str], message: str):
        super().__init__(f"{kinds[0]}: {message}")
        self.kinds, self.message = kinds, message


class TimedOut(Exception):
    """A call did not come back within the part's time limit."""

    def __init__(self, seconds: float):
        super().__init__(f"no answer in {seconds:g} s")
        self.seconds = seconds


class Died(Exception):
    """The child ended before answering: os._exit, a signal or a limit."""

    def __init__(self, why: str, output: str):
        super().__init__(why)
        self.why, self.output = why, output


@dataclass
class Sandbox:
    definitions: str                                    # the code to define the answers
    offers: dict[str, str] = field(default_factory=dict)  # narrow modules the code may import: name -> code
    stand_ins: str = ""                                 # code defining correct versions of other exercises
    replace: tuple[str, ...] = ()                       # names of the student's that those replace
    limits: Limits = Limits()
    denied: tuple[str, ...] = ()                        # more folders the child may not read (the course's)

    def __enter__(self) -> Sandbox:
        child = _take()
        self.process, self.output, self.scratch, self._replies = child.process, child.output, child.scratch, child.replies
        self._buffer, self._proxies = b"", {}
        try:
            self._start()
        except BaseException:
            self.close()  # a child that never got ready leaves no process, descriptor or folder behind
            raise
        return self

    def _start(self) -> None:
        self.deadline = time.monotonic() + self.limits.start_s
        self._receive()  # started: torch imported (a spare child did that while the last part was judged)
        self.deadline = time.monotonic() + self.limits.seconds  # the student's code from here: definitions, calls
        self._send({"definitions": self.definitions, "offers": self.offers, "stand_ins": self.stand_ins,
                    "replace": list(self.replace), "scratch": self.scratch,
                    "readable": readable(), "denied": [str(Path(__file__).resolve().parents[1]), *self.denied],
                    "limits": {"cpu_s": self.limits.cpu_s, "memory_bytes": self.limits.memory_bytes,
                               "file_bytes": self.limits.file_bytes}})
        ready = self._receive()
        self.names, self.notes = set(ready.get("names", ())), list(ready.get("notes", ()))

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        Child(self.process, self.output, self.scratch, self._replies).discard()

    # -- what the judge holds ------------------------------------------------------------------------------------

    def answer(self, name: str) -> Remote | None:
        """The student's `name` over there (None when the code does not define it)."""
        return Remote(self, name) if name in self.names else None

    def request(self, message: dict) -> dict:
        self._send(message)
        return self._receive()

    # -- the wire ------------------------------------------------------------------------------------------------

    def _send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        fd = self.process.stdin.fileno()
        while data:
            if not select.select([], [fd], [], max(0.0, self.deadline - time.monotonic()))[1]:
                self._time_out()
            try:
                data = data[os.write(fd, data[:65536]):]
            except BrokenPipeError:
                self._died()

    def _receive(self) -> dict:
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_REPLY:
                self.close_child()
                raise Died(f"it sent back an answer of more than {MAX_REPLY // 2**20} MiB", self.tail())
            if not select.select([self._replies], [], [], max(0.0, self.deadline - time.monotonic()))[0]:
                self._time_out()
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                self._died()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict):
                raise ValueError(reply)
            return reply
        except (ValueError, RecursionError):
            self.close_child()
            raise Died("it wrote something that is not an answer where answers go", self.tail()) from None

    def next_reply(self) -> dict:
        return self._receive()

    def close_child(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=30)

    def _time_out(self):
        self.close_child()
        raise TimedOut(self.limits.seconds)

    def _died(self):
        code = self.process.wait(timeout=30)
        why = {-9: "it was killed (SIGKILL: past its memory or CPU limit, or os.kill)",
               -24: f"it used more than {self.limits.cpu_s} s of CPU"}.get(
            code, f"its process ended with {'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)} "
                  f"(os._exit, or a crash)")
        raise Died(why, self.tail())

    def tail(self, lines: int = 12) -> str:
        self.output.flush()
        with open(self.output.name, "rb") as f:
            f.seek(max(0, os.path.getsize(self.output.name) - 4000))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])


# -- the children ----------------------------------------------------------------------------------------------

@dataclass
class Child:
    """A child interpreter, started before it is needed: it imports torch, says so, and waits for its setup."""
    process: subprocess.Popen
    output: object      # the file its stdout and stderr go to
    scratch: str        # its working directory, HOME and TMPDIR
    replies: int        # the reading end of its reply pipe

    @classmethod
    def start(cls) -> Child:
        scratch = tempfile.mkdtemp(prefix="teachspec-graded-")
        output = open(os.path.join(scratch, "output.txt"), "wb")
        replies, reply_w = os.pipe()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        process = subprocess.Popen([sys.executable, "-I", "-B", str(CHILD), str(reply_w), str(SPARE_WAITS_S)],
                                   stdin=subprocess.PIPE, stdout=output, stderr=output, cwd=scratch, env=env,
                                   pass_fds=(reply_w,), start_new_session=True)
        os.close(reply_w)  # the child holds the writing end now: its death is an end of file here
        return cls(process, output, scratch, replies)

    def discard(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait(timeout=30)
        self.process.stdin.close()
        os.close(self.replies)
        self.output.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


SPARE_WAITS_S = 120  # a spare child nobody takes ends itself: an idle kernel keeps no torch process about
_spare: list[Child] = []


def _take() -> Child:
    """A child for the next part, and a spare started for the part after it. Starting an interpreter and importing
    torch is most of a part's time; the spare does it on another core while this part is judged."""
    child = _spare.pop() if _spare else None
    if child is not None and child.process.poll() is not None:  # a spare that waited too long and ended
        child.discard()
        child = None
    _spare.append(Child.start())
    return child if child is not None else Child.start()


@atexit.register
def _discard_spare() -> None:
    while _spare:
        _spare.pop().discard()


def readable() -> list[str]:
    """The folders the child's interpreter needs to read: its standard library and installed packages."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values(),
             str(Path(torch.__file__).resolve().parents[1])}
    return sorted(p for p in paths if p)


# -- values across ---------------------------------------------------------------------------------------------

def to_wire(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, torch.Tensor):
        return {"tensor": v.detach().cpu().tolist(), "dtype": str(v.dtype).removeprefix("torch.")}
    if isinstance(v, torch.Generator):
        return {"generator": v.initial_seed()}
    if isinstance(v, Remote):
        return {"ref": v._target["ref"]}
    if isinstance(v, list):
        return [to_wire(x) for x in v]
    if isinstance(v, tuple):
        return {"t": [to_wire(x) for x in v]}
    if isinstance(v, dict):
        return {"d": [[to_wire(k), to_wire(x)] for k, x in v.items()]}
    if isinstance(v, range):
        return [to_wire(x) for x in v]
    raise TypeError(f"the grader cannot send a {type(v).__name__} to graded code")


def from_wire(box: Sandbox, v):
    if isinstance(v, list):
        return [from_wire(box, x) for x in v]
    if isinstance(v, dict):
        if "t" in v:
            return tuple(from_wire(box, x) for x in v["t"])
        if "d" in v:
            return {from_wire(box, k): from_wire(box, x) for k, x in v["d"]}
        if "tensor" in v:
            try:
                return torch.tensor(v["tensor"], dtype=getattr(torch, v["dtype"]))
            except (TypeError, ValueError, AttributeError):
                return v["tensor"]
        if "ref" in v:
            return box._proxies.setdefault(v["ref"], Remote(box, {"ref": v["ref"]}, v.get("type", "object")))
    return v


def value(box: Sandbox, reply: dict):
    try:
        if "error" in reply:
            raise Raised([str(k) for k in reply["error"]] or ["Exception"], str(reply.get("message", "")))
        return from_wire(box, reply.get("value"))
    except (TypeError, KeyError, ValueError, RecursionError) as e:  # not what the child itself sends
        box.close_child()
        raise Died(f"it sent back something that is not an answer ({type(e).__name__})", box.tail()) from None


class Remote:
    """The student's function, class or object, over there: call it, read an attribute, iterate it."""

    def __init__(self, box: Sandbox, target, type_name: str = ""):
        self._box, self._target, self._type = box, target, type_name

    def __call__(self, *args):
        reply = self._box.request({"op": "call", "target": self._target, "args": to_wire(list(args))})
        for given, after in zip(args, reply.get("args_after") or ()):
            if isinstance(given, torch.Tensor) and after is not None:  # changed in place over there: here too
                changed = value(self._box, {"value": after})
                if isinstance(changed, torch.Tensor) and changed.shape == given.shape:
                    given.copy_(changed)
        return value(self._box, reply)

    def many(self, calls: list[tuple]) -> list:
        """The same function on many arguments, one message there and the answers as they come: the statistical
        parts call a function thousands of times."""
        self._box._send({"op": "many", "target": self._target, "calls": [to_wire(list(a)) for a in calls]})
        out, failed = [], None
        for i in range(len(calls)):
            try:
                reply = self._box.next_reply()
            except (TimedOut, Died) as e:
                e.index = i  # the call it was on
                raise
            if "error" in reply and failed is None:
                failed = i, reply
            out.append(None if "error" in reply else value(self._box, reply))
        if failed is not None:  # every answer read: the wire is in step for the next call
            try:
                value(self._box, failed[1])
            except Raised as e:
                e.index = failed[0]
                raise
        return out

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return value(self._box, self._box.request({"op": "getattr", "target": self._target, "name": name}))
        except Raised as e:
            if "AttributeError" in e.kinds:
                raise AttributeError(e.message) from None  # so that hasattr() answers False, as it would there
            raise

    def _items(self) -> list:
        return value(self._box, self._box.request({"op": "list", "target": self._target}))

    def __iter__(self):
        return iter(self._items())

    def __len__(self) -> int:  # not len(list(self)): list() asks __len__ first
        return len(self._items())

    def __repr__(self) -> str:
        try:
            return str(value(self._box, self._box.request({"op": "repr", "target": self._target})))
        except Exception:  # noqa: BLE001 -- a repr is for a message: never the reason a message fails
            return f"<a {self._type or 'value'} of yours>"
