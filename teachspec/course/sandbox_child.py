"""The far side of the grading sandbox: the interpreter the student's code runs in, with nothing of the grader's.

`teachspec.course.sandbox` starts this file by its path (`python -I -B sandbox_child.py`), so it imports nothing
of teachspec. It is started before it is needed (`python -I -B sandbox_child.py REPLY_FD WAIT_S`): it imports torch, says
"started", and waits up to WAIT_S seconds for one setup message on stdin, then serves calls until stdin closes:

    setup   {"definitions": code, "offers": {module: code}, "stand_ins": code, "replace": [names], "limits": ...,
             "readable": [folders], "denied": [folders], "scratch": folder}
    call    {"op": "call", "target": name or ref, "args": [...]}       -> {"value": ...} or {"error": ...}
            {"op": "many", "target": ..., "calls": [[args], ...]}       -> one reply per call, as each returns
            {"op": "getattr" | "repr" | "list", ...}

Replies go to a pipe of their own (REPLY_FD), not stdout: the student's prints go to a file the parent reads at
most the end of. Values cross as JSON (never pickle, which would run the child's code in the grader): numbers, strings, lists,
tuples, dicts, tensors by value; anything else stays here and crosses as a reference the parent calls back
through.

What holds the student's code here, in the order it is set up:
- torch is imported first, before any of the student's code is here.
- limits (`resource`): CPU seconds, address space, file size, open files. The parent adds a wall-clock deadline.
- then an audit hook (PEP 578), which code cannot remove, refuses: importing teachspec
  (but the narrow copies the exercise is offered, `offers`; a finder first on sys.meta_path refuses it to
  importlib too), opening files outside the folders the interpreter needs and the scratch folder, opening a folder
  (whose descriptor would reach files past these checks), writing, renaming or removing outside the scratch folder,
  changing directory, sockets, new processes (the C module torch loaded to start them is made unreachable first),
  signals, ctypes, and gc's walks over every object.
- the definitions run statement by statement: an import or assignment that fails binds nothing, or, for an import
  of teachspec, a stand-in that raises the refusal when used, so that one refused line says what it is.

An audit hook is a tripwire, not a wall: code that gets at C directly (a module already loaded that starts
processes without an audit event, say) is outside it. INSTRUCTORS.md says how to contain the rest.
"""

import ast
import json
import os
import resource
import select
import sys

REFUSED = "teachspec is not importable where your code is graded"


def main() -> None:
    replies = os.fdopen(int(sys.argv[1]), "w", encoding="utf-8")
    sys.dont_write_bytecode = True

    import torch  # before the hook: its import loads libraries through ctypes

    torch.set_num_threads(1)
    send(replies, {"started": True})  # started ahead of need: the setup comes when a part is judged
    if not select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:
        return  # a spare nobody took
    line = sys.stdin.readline()
    if not line:
        return  # the parent is gone
    setup = json.loads(line)
    limits = setup["limits"]
    for name, value in (("RLIMIT_CPU", limits["cpu_s"]), ("RLIMIT_AS", limits["memory_bytes"]),
                        ("RLIMIT_FSIZE", limits["file_bytes"]), ("RLIMIT_NOFILE", 256)):
        resource.setrlimit(getattr(resource, name), (value, value))
    home = {"__name__": "__main__", "__builtins__": __builtins__}
    offered = offer(setup["offers"])
    stand_ins: dict = {"__name__": "stand_ins"}
    exec(compile(setup["stand_ins"], "<stand-ins>", "exec"), stand_ins)
    unreachable("_posixsubprocess")  # torch loaded it: its fork_exec starts a process with no audit event
    sys.meta_path.insert(0, Refuser(offered))  # importlib.import_module raises no "import" audit event
    sys.addaudithook(Guard(setup["scratch"], setup["readable"], setup["denied"], offered))
    notes = define(setup["definitions"], home)
    for name in setup["replace"]:
        home[name] = stand_ins[name]  # the part judges one exercise: the others it calls are correct ones
    send(replies, {"ready": True, "names": sorted(n for n in home if not n.startswith("__")), "notes": notes})
    serve(replies, home, torch)


# -- what the exercise may import from teachspec -----------------------------------------------------------------

def offer(offers: dict[str, str]) -> set[str]:
    """The narrow modules an exercise is offered (`teachspec.sampling` holding `sample`, say), built from the code
    the parent sends and registered under their names, with the packages above them as empty ones."""
    import types

    names = set()  # the offered modules and the packages made to hold them
    for name, code in offers.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            if package not in sys.modules:
                sys.modules[package] = types.ModuleType(package, "teachspec as the grader offers it: a few names")
                sys.modules[package].__path__ = []
                names.add(package)
                sys.modules[package].__getattr__ = refuse(package)
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[package])
        module = types.ModuleType(name)
        exec(compile(code, f"<{name}, as the grader offers it>", "exec"), module.__dict__)
        sys.modules[name] = module
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], module)
        names.add(name)
    return names


def refuse(package: str):
    """A made package's module `__getattr__` (PEP 562): any name it was not given is refused, saying why."""
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(f"{REFUSED}: {package}.{name} is teachspec's own. Write the exercise yourself.")
    return __getattr__


def unreachable(module: str) -> None:
    """Take an already-loaded C module out of sys.modules and out of every module that holds it or one of its
    functions, so that reaching it again means importing it, which the audit hook refuses (gc, which could find
    the functions, is refused too)."""
    found = sys.modules.pop(module, None)
    if found is None:
        return
    functions = {id(v) for v in vars(found).values() if callable(v)}
    for holder in list(sys.modules.values()):
        for name, v in list(vars(holder).items()):
            if v is found or id(v) in functions:
                setattr(holder, name, None)


class Refuser:
    """A finder first on sys.meta_path: refuses teachspec (but what is offered) to importlib.import_module too."""

    def __init__(self, offered: set[str]):
        self.offered = offered

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "teachspec" and name not in self.offered:
            raise ImportError(f"{REFUSED}: {name} holds teachspec's own answers. Write the exercise yourself.")
        return None


class Guard:
    """The audit hook: refuses what graded code has no business doing, with a message that says what and why."""

    NEVER = ("socket.", "subprocess.", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn",
             "os.system", "os.kill", "os.killpg", "os.symlink", "os.link", "ctypes.", "pty.", "resource.setrlimit",
             "os.chmod", "os.chown", "os.putenv", "os.unsetenv", "sys.remote_exec", "gc.get_objects",
             "gc.get_referrers", "gc.get_referents", "os.chdir")
    # events that change a file or a folder, and how many of their first arguments are paths: scratch only
    CHANGES = {"os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.truncate": 1, "os.utime": 1,
               "os.chflags": 1, "os.lchflags": 1, "os.setxattr": 1, "os.removexattr": 1}

    def __init__(self, scratch: str, readable: list[str], denied: list[str], offered: set[str]):
        self.scratch = os.path.realpath(scratch)
        self.readable = [os.path.realpath(p) for p in readable]
        self.denied = [os.path.realpath(p) for p in denied]  # teachspec's own files, wherever they are installed
        self.offered = offered

    def __call__(self, event: str, args: tuple) -> None:
        if event.startswith(self.NEVER):
            raise PermissionError(f"{event} is not allowed where your code is graded")
        if event == "import":
            name = args[0] or ""
            top = name.split(".")[0]
            if top in ("teachspec", "_posixsubprocess", "_socket", "_ctypes") and name not in self.offered:
                allowed = sorted(n for n in self.offered if not any(m.startswith(n + ".") for m in self.offered))
                raise ImportError(f"{REFUSED}: {name} holds teachspec's own answers. Write the exercise yourself; "
                                  f"it may import {', '.join(allowed) or 'nothing of teachspec'}.")
        elif event in self.CHANGES:
            for path in args[:self.CHANGES[event]]:
                if not isinstance(path, int) and not under(os.path.realpath(os.fsdecode(path)), [self.scratch]):
                    raise PermissionError(f"your code may change files only in its scratch folder, not {path}")
        elif event == "open":
            path, mode = args[0], args[1] or "r"
            if isinstance(path, int):
                return  # a descriptor already open
            real = os.path.realpath(os.fsdecode(path))
            writes = any(c in str(mode) for c in "wax+") or (isinstance(args[2], int) and args[2] & (
                os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            inside = under(real, [self.scratch])
            if writes and not inside:
                raise PermissionError(f"your code may write only in its scratch folder, not {real}")
            if os.path.isdir(real):  # a folder's descriptor reaches files by dir_fd, which the event does not show
                raise PermissionError(f"your code may not open the folder {real} where it is graded")
            if under(real, self.denied) or not inside and not under(real, self.readable) and real not in (
                    "/dev/null", "/dev/urandom"):
                raise PermissionError(f"your code may not read {real} where it is graded")


def under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def define(code: str, home: dict) -> list[str]:
    """Run the definitions one top-level statement at a time; returns a note for each that failed. The names a
    failed statement would bind are bound to `Unbound`, which raises its error when used: a line that hands
    an answer to teachspec leaves no earlier answer standing in for it."""
    notes = []
    for node in ast.parse(code).body:
        try:
            exec(compile(ast.Module([node], []), "<your exercise cells>", "exec"), home)
        except BaseException as e:  # noqa: BLE001 -- a failed line binds nothing usable; its note says why
            why = f"line {node.lineno}: {type(e).__name__}: {e}"
            for name in bound(node):
                home[name] = Unbound(name, why, refused=isinstance(e, ImportError))
            notes.append(why)
    return notes


def bound(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []  # a statement that binds nothing


class Unbound:
    """What a failed line binds: using it raises why it failed (an ImportError for a refused import)."""

    def __init__(self, name: str, why: str, refused: bool):
        self._error = ImportError(why.split(": ", 2)[-1]) if refused else NameError(
            f"{name} could not be defined where your code is graded ({why})")

    def __getattr__(self, name):
        raise self._error

    def __call__(self, *args, **kwargs):
        raise self._error


# -- serving calls -----------------------------------------------------------------------------------------------

def serve(replies, home: dict, torch) -> None:
    objects: dict[int, object] = {}

    def from_wire(v):
        if isinstance(v, list):
            return [from_wire(x) for x in v]
        if isinstance(v, dict):
            if "t" in v:
                return tuple(from_wire(x) for x in v["t"])
            if "d" in v:
                return {from_wire(k): from_wire(x) for k, x in v["d"]}
            if "tensor" in v:
                return torch.tensor(v["tensor"], dtype=getattr(torch, v["dtype"]))
            if "generator" in v:
                return torch.Generator().manual_seed(v["generator"])
            if "ref" in v:
                return objects[v["ref"]]
        return v

    def to_wire(v, depth: int = 0):
        if depth > 50:
            raise ValueError("the answer is nested more than 50 deep")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu()
            return {"tensor": v.tolist(), "dtype": str(v.dtype).removeprefix("torch.")}
        if type(v) is list:
            return [to_wire(x, depth + 1) for x in v]
        if type(v) is tuple:
            return {"t": [to_wire(x, depth + 1) for x in v]}
        if type(v) is dict:
            return {"d": [[to_wire(k, depth + 1), to_wire(x, depth + 1)] for k, x in v.items()]}
        if type(v).__module__ == "numpy" and hasattr(v, "tolist"):
            return to_wire(v.tolist(), depth + 1)
        objects[id(v)] = v
        return {"ref": id(v), "type": type(v).__name__, "callable": callable(v)}

    def target(t):
        return objects[t["ref"]] if isinstance(t, dict) else home[t]

    def answer(fn) -> dict:
        try:
            return {"value": to_wire(fn())}
        except BaseException as e:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt are a verdict too
            kinds = [c.__name__ for c in type(e).__mro__]
            return {"error": kinds, "message": str(e)[:2000]}

    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "call":
            args = from_wire(request["args"])
            reply = answer(lambda: target(request["target"])(*args))
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            reply["args_after"] = [to_wire(a) if isinstance(a, torch.Tensor) else None for a in args] if tensors \
                else None
            send(replies, reply)
        elif op == "many":
            fn = target(request["target"])
            for call in request["calls"]:
                args = from_wire(call)
                send(replies, answer(lambda: fn(*args)))
        elif op == "getattr":
            send(replies, answer(lambda: getattr(target(request["target"]), request["name"])))
        elif op == "repr":
            send(replies, answer(lambda: repr(target(request["target"]))[:500]))
        elif op == "list":
            send(replies, answer(lambda: list(target(request["target"]))))


def send(replies, message: dict) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


if __name__ == "__main__":
    main()
