"""The `teachspec` command.

    teachspec demo                                   # speculative decoding live in the terminal, then the stats
    teachspec generate "Return a new dictionary"     # plain decoding on the bundled target
    teachspec bench speculative --json out.json      # speedups measured side by side
    teachspec bench speculative --workloads agentic  # every drafter, suffix decoding too, on many requests
    teachspec bench program                          # structured programs, radix cache on vs off
    teachspec bench contention                       # decoding next to busy processes, with and without the policy
    teachspec bench serving                          # teachspec and vLLM on the same pair, side by side
    teachspec bench batch                            # speculation as the batch grows: the formula against vLLM
    teachspec bench routing                          # every routing policy on 2 vLLM replicas, beside the simulator
    teachspec serve --speculate model                # vLLM's server on the bundled pair, until Ctrl-C
    teachspec course my-course                       # the notebooks, assignments and traces, ready to open
    teachspec course my-key --with-solutions         # the instructor's copy: solutions, INSTRUCTORS.md
    teachspec grading nbgrader my-grading            # the assignments laid out for nbgrader (or: otter, pytest)
    teachspec student assignments/a1_acceptance_rule.ipynb   # the student version of an assignment
    teachspec traces                                 # re-record the traces the notebooks replay
    teachspec pin 05_radix_attention.ipynb           # run a notebook, keep its outputs for readers without a kernel

Quick to answer. Nothing heavy is imported here: torch and transformers load only once a command runs, so
`teachspec --help` and every `--help` answer at once. Every argument is checked by the parsers below before a
model loads, and a mistake ends in one line, `teachspec NAME: error: ...`, with exit status 2. `none` means plain
decoding wherever a command takes `--speculate`. Ctrl-C ends a command with one line and status 130.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from teachspec.arguments import COURSE, Parser, description, new_file, whole

from teachspec.routing import POLICIES  # the routers' policies: a tuple of names, nothing imported behind it
from teachspec.speculate import DRAFTERS, SERVED  # the registry of drafters: no torch behind it

SPECULATE_CHOICES = (*DRAFTERS, "none")  # none: plain decoding
K_POLICIES = ("adaptive", "heuristic", "confidence")
DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")
DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "float64")  # teachspec.device.DTYPES' names


# -- argument types: each checks a value and says what is allowed ------------------------------------------------

def number(low: float, high: float = math.inf, low_open: bool = False):
    """A finite number in [low, high] (or (low, high] when `low_open`)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):
            span = f"in {'(' if low_open else '['}{low:g}, {high:g}]" if high < math.inf else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"must be a number {span}, got {text}")
        return value
    return parse


def hidden_width(text: str) -> int:
    value = whole(64)(text)
    if value % 64:
        raise argparse.ArgumentTypeError(f"must be a multiple of 64 (the head size), got {value}")
    return value


def draft_length(text: str) -> int | str:
    """k: a whole number >= 0, or the name of a draft-length policy."""
    if text in K_POLICIES:
        return text
    try:
        return whole(0)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 or one of {', '.join(K_POLICIES)}; "
                                         f"got {text!r}") from None


def speculation(*allowed: str):
    """A drafter name from `allowed`; "none" becomes None (plain decoding)."""
    def parse(text: str) -> str | None:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(allowed)}")
        return None if text == "none" else text
    return parse


def served_pair(text: str) -> str:
    """A pair vLLM can be started on: a bundled one, or a folder holding target/config.json (and draft/)."""
    if text in ("tiny",) or (Path(text) / "target" / "config.json").is_file():
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is neither tiny (the bundled pair) nor a folder holding "
                                     f"target/config.json")


def device_name(text: str) -> str:
    """A device this machine could have, found without importing torch (which takes seconds): CUDA needs an NVIDIA
    driver, MPS a Mac with Apple silicon. Whether torch can use it is checked once it has loaded."""
    import platform

    if not DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device name; use cpu, cuda, cuda:N or mps")
    no_driver = sys.platform == "linux" and not (Path("/proc/driver/nvidia/version").exists()
                                                 or Path("/dev/nvidiactl").exists())
    if text.startswith("cuda") and no_driver:
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has no NVIDIA driver, so no CUDA device; use cpu")
    if text == "mps" and not (sys.platform == "darwin" and platform.machine() == "arm64"):
        raise argparse.ArgumentTypeError("'mps' is Apple silicon's GPU, and this is not a Mac with one; use cpu")
    return text


def dtype_name(text: str) -> str:
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a dtype; use one of {', '.join(DTYPES)}")
    return text


def model_source(text: str) -> str:
    """A local folder, or a hub id this machine has cached or can download (`teachspec.hub`): a missing folder
    or an unreachable hub is said in a second or two, not after transformers' minute of retries."""
    from teachspec.hub import problem

    why = problem(text)
    if why:
        raise argparse.ArgumentTypeError(f"{text!r}: {why}")
    return text


def bundled_pair(text: str) -> str:
    """A pair shipped in the package: a folder of teachspec/models/ that holds a target/."""
    names = sorted(p.name for p in (Path(__file__).parent / "models").iterdir() if (p / "target").is_dir())
    if text not in names:
        raise argparse.ArgumentTypeError(f"{text!r} is not a bundled pair; bundled pairs: {', '.join(names)}. For "
                                         f"other models use --target and --draft")
    return text


def text(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("is empty: give at least one character")
    return value


# -- the options several commands share -------------------------------------------------------------------------

def add_model_args(ap: argparse.ArgumentParser, draft: bool = True) -> None:
    """--pair, or --target (and --draft, for a command that speculates), then the device options."""
    ap.add_argument("--pair", type=bundled_pair, default=None, help="a bundled pair (default: tiny)")
    ap.add_argument("--target", type=model_source, default=None,
                    help="a hub id or local folder for the target (instead of --pair)")
    if draft:
        ap.add_argument("--draft", type=model_source, default=None,
                        help="a hub id or local folder for the draft model (with --target)")
    add_device_args(ap)


def check_models(args) -> None:
    """The model options against each other, before anything loads."""
    if getattr(args, "target", None) is not None and args.pair is not None:
        args.parser.error(f"give --pair or --target, not both (got --pair {args.pair} --target {args.target})")
    if getattr(args, "draft", None) is not None and args.target is None:
        args.parser.error("--draft needs --target: a draft guesses for a target (without either, the bundled "
                          "pair tiny runs with its own draft)")


def add_device_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--device", type=device_name, default=None, help="cpu (default), cuda, cuda:N or mps")
    ap.add_argument("--dtype", type=dtype_name, default=None,
                    help="float32 or fp32 (CPU default), bfloat16 or bf16 (GPU default), float16 or fp16, float64")
    ap.add_argument("--threads", type=whole(1), default=None,
                    help="CPU threads for torch (default: the CPUs this process may use; see teachspec/threads.py)")


def add_sampling_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--max-new-tokens", type=whole(0), default=64, help="tokens to generate (default 64)")
    ap.add_argument("--temperature", type=number(0), default=0.0, help="0 (default) decodes greedily")
    ap.add_argument("--top-k", type=whole(1), default=None, help="sample from the k likeliest tokens only")
    ap.add_argument("--top-p", type=number(0, 1, low_open=True), default=None,
                    help="sample from the smallest set of tokens whose probability reaches p (nucleus)")
    ap.add_argument("--seed", type=whole(0), default=0, help="random seed (default 0)")


def add_served_args(ap: argparse.ArgumentParser) -> None:
    """The benches that start vLLM servers: a bundled pair (vLLM serves it by name) and teachspec's threads."""
    ap.add_argument("--pair", type=bundled_pair, default="tiny", help="a bundled pair (default: tiny)")
    ap.add_argument("--threads", type=whole(1), default=None,
                    help="CPU threads for teachspec's torch (default: the policy; vLLM chooses its own)")


def add_json_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", type=new_file, default=None, help="also write the results here, as JSON")


def pair_from(args, draft: bool = True):
    """The pair the options name; `draft=False`: its target alone, for plain decoding."""
    from teachspec.threads import set_threads
    from teachspec.models import BUNDLED, load_pair

    if args.threads is not None:
        set_threads(args.threads)
    if not draft and args.target is None:  # the bundled pair's target and tokenizer, without its draft
        root = BUNDLED[args.pair or "tiny"]
        return load_pair(target=root / "target", tokenizer=root, device=args.device, dtype=args.dtype)
    return load_pair(args.pair, target=args.target, draft=args.draft if draft else None, device=args.device,
                     dtype=args.dtype)


def save_json(result: dict, path: Path | None) -> None:
    if path is not None:
        from teachspec.bench import save

        save(result, str(path))


# -- the commands -----------------------------------------------------------------------------------------------

def cmd_generate(args) -> None:
    from teachspec.decode import generate

    stop = {"stop": args.stop} if args.stop else {}  # only when asked: older `generate`s take no stop=
    out = generate(args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   top_k=args.top_k, top_p=args.top_p, seed=args.seed, pair=pair_from(args, draft=False), **stop)
    s = out.stats
    print(args.prompt + out.text)
    print(f"\n-- {plural(s.new_tokens, 'token')} in {s.wall_s:.3f} s: {s.tokens_per_s:.1f} tokens/s, "
          f"{plural(s.target_passes, 'target pass', 'target passes')}, stopped by {out.finish_reason}",
          file=sys.stderr)


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def cmd_demo(args) -> None:
    from teachspec.demo import run

    run(pair_from(args), args.prompt, args.max_new_tokens, args.temperature, args.k, args.speculate, args.seed,
        colour=args.colour == "always" or (args.colour == "auto" and sys.stdout.isatty()))


def cmd_bench_speculative(args) -> None:
    if args.workloads:
        return cmd_bench_workload(args)
    from teachspec.bench import speculative
    from teachspec.workloads import copy_heavy, docs_completion

    pair = pair_from(args)
    docs = [pair.encode(r.prompt) for r in docs_completion(n_prompts=args.prompts).requests]
    # the passage's last new_tokens tokens are left out of the prompt: all that is decoded could be copied
    copy = [pair.encode(r.prompt) for r in copy_heavy(n_prompts=args.prompts, passage_tokens=args.new_tokens + 32,
                                                      max_new_tokens=args.new_tokens).requests]
    result = speculative.bench(pair, docs, copy, n=args.new_tokens, ks=args.ks, seed=args.seed)
    print(speculative.markdown(result))
    save_json(result, args.json)


def cmd_bench_workload(args) -> None:
    from teachspec.bench import workload

    names = workload.check_names(args.workloads)
    pair = pair_from(args)
    result = workload.bench(pair, names, n=args.new_tokens, scale=args.scale)
    print(workload.markdown(result))
    save_json(result, args.json)


def cmd_bench_mechanics(args) -> None:
    from teachspec.bench import mechanics, speculative
    from teachspec.threads import set_threads

    if args.threads is not None:
        set_threads(args.threads)
    pair = mechanics.config_pair(mechanics.Shape(args.layers, args.hidden), args.device, args.dtype)
    result = mechanics.bench(pair, args.prompts, args.prompt_tokens, args.new_tokens, args.ks, args.seed)
    print(speculative.markdown(result))
    save_json(result, args.json)


def cmd_bench_radix(args) -> None:
    from teachspec.bench import radix

    radix.check_workloads(args.workloads)
    result = radix.bench(pair_from(args), names=args.workloads, cache_tokens=args.cache_tokens, rounds=args.rounds,
                         speculate=args.speculate)
    print(radix.markdown(result))
    save_json(result, args.json)


def cmd_bench_program(args) -> None:
    from teachspec.bench import program

    program.check_examples(args.examples)
    result = program.bench(pair_from(args), names=args.examples, rounds=args.rounds, cache_tokens=args.cache_tokens,
                           speculate=args.speculate, k=args.k, questions=args.questions)
    print(program.markdown(result))
    save_json(result, args.json)


def cmd_bench_widgets(args) -> None:
    from teachspec.bench.widgets import live_overhead

    pair = pair_from(args)
    for prompt in ("def main():", "Return a new dictionary"):
        print(f"{prompt!r}: {live_overhead(pair, prompt, max_new_tokens=args.new_tokens, repeats=args.repeats)}")


def cmd_bench_contention(args) -> None:
    from teachspec.bench import contention

    result = contention.bench(pair_from(args), busy=args.busy, new_tokens=args.new_tokens, repeats=args.repeats,
                              k=args.k)
    print(contention.markdown(result))
    save_json(result, args.json)


def cmd_bench_serving(args) -> None:
    from teachspec.bench import serving
    from teachspec.workloads import docs_completion

    from teachspec.threads import set_threads
    from teachspec.models import load_pair
    from teachspec.serving import vllm_python

    with server_errors(args):
        vllm_python()  # vLLM missing: say how to install it before anything loads
        if args.threads is not None:
            set_threads(args.threads)
        pair = load_pair(args.pair)
        work = docs_completion(n_prompts=args.prompts + max(args.concurrency), max_new_tokens=args.new_tokens)
        ids = [pair.encode(r.prompt) for r in work.requests]
        result = serving.bench(pair, ids[:args.prompts], ids[args.prompts:], n=args.new_tokens,
                               concurrency=tuple(args.concurrency))
    print(serving.markdown(result))
    save_json(result, args.json)


def cmd_bench_batch(args) -> None:
    if args.batches != sorted(set(args.batches)):  # before any import: a mistake costs no torch
        args.parser.error(f"argument --batches: must be increasing, got {' '.join(map(str, args.batches))}")
    from teachspec.bench import batch
    from teachspec.models import load_pair
    from teachspec.serving import vllm_python
    from teachspec.threads import set_threads
    from teachspec.workloads import docs_completion

    with server_errors(args):
        vllm_python()  # vLLM missing: say how to install it before anything loads
        if args.threads is not None:
            set_threads(args.threads)
        pair = load_pair(args.pair)
        work = docs_completion(n_prompts=args.prompts, max_new_tokens=args.new_tokens)
        result = batch.bench(pair, [pair.encode(r.prompt) for r in work.requests], n=args.new_tokens,
                             batches=tuple(args.batches), k=args.k, rounds=args.rounds)
    print(batch.markdown(result))
    save_json(result, args.json)


def cmd_bench_routing(args) -> None:
    if len(set(args.policies)) != len(args.policies):  # before any import: a mistake costs no torch
        args.parser.error(f"argument --policies: must be distinct, got {' '.join(args.policies)}")
    from teachspec.bench import routing
    from teachspec.models import load_pair
    from teachspec.threads import set_threads

    with server_errors(args):
        if args.threads is not None:
            set_threads(args.threads)
        result = routing.bench(load_pair(args.pair), args.policies, replicas=args.replicas, kv_blocks=args.kv_blocks,
                               concurrency=args.concurrency, n_tenants=args.tenants, n_requests=args.requests,
                               zipf=args.zipf, system_tokens=args.system_tokens, trace=args.trace)
    if args.json is True:  # --json alone: the result as JSON instead of the table
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(routing.markdown(result))
        save_json(result.as_dict(), args.json)


def cmd_serve(args) -> None:
    import time

    from teachspec.serving import router_binary, start_cluster, start_vllm, vllm_python

    with server_errors(args):
        vllm_python()  # vLLM missing: say so, and how to install it, before anything starts
        if args.replicas > 1 or args.router is not None:
            router_binary()  # likewise the router
            policy = args.router or "cache_aware"
            print(f"starting {args.replicas} vLLM replicas on {args.pair} behind vllm-router ({policy}); about "
                  f"{40 * args.replicas} s on 2 CPUs ...", flush=True)
            with start_cluster(args.pair, args.replicas, policy, kv_blocks=args.kv_blocks or 64,
                               speculate=args.speculate, k=args.k, api_key=args.api_key) as cluster:
                print(f"router     {cluster.url}  (/v1/completions; policy {policy}; log: {cluster.router_log})")
                for i, server in enumerate(cluster.servers):
                    print(f"replica {i}  {server.url}  pid {server.pid}  kv events {server.events_endpoint}  "
                          f"(log: {server.log})")
                print("Ctrl-C stops them all", flush=True)
                while all(cluster.alive()) and cluster.router.poll() is None:
                    time.sleep(0.5)
                down = [i for i, up in enumerate(cluster.alive()) if not up]
                raise RuntimeError(f"replica {down[0]} exited:\n{cluster.servers[down[0]].tail()}" if down else
                                   f"the router exited with status {cluster.router.returncode}")
        print(f"starting vLLM on {args.pair} (speculate={args.speculate or 'none'}, k={args.k}); about 30 s on 2 "
              f"CPUs ...", flush=True)
        with start_vllm(args.pair, speculate=args.speculate, k=args.k, port=args.port, kv_blocks=args.kv_blocks,
                        api_key=args.api_key) as server:
            print(f"serving {server.model}\n  url        {server.url}  (/v1/completions, /metrics)\n  kv events  "
                  f"{server.events_endpoint}\n  pid        {server.pid}  (log: {server.log})\n"
                  f"watch it:  Watcher({server.url!r}, {server.events_endpoint!r})  (teachspec.serving)\n"
                  f"Ctrl-C stops it", flush=True)
            while server.alive():
                time.sleep(0.5)
            raise RuntimeError(f"the server exited with status {server.process.returncode}:\n{server.tail()}")


def server_errors(args):
    """A ServerError (vLLM missing, not starting, not answering) ends the command with its message, status 2."""
    from contextlib import contextmanager

    from teachspec.serving import ServerError

    @contextmanager
    def said():
        try:
            yield
        except (ServerError, RuntimeError) as e:
            args.parser.exit(2, f"{args.parser.prog}: error: {e}\n")
    return said()


def cmd_student(args) -> None:
    from teachspec.course.student import command

    command(args)


def cmd_traces(args) -> None:
    from teachspec.course.traces import command

    command(args)


def cmd_pin(args) -> None:
    from teachspec.course.pin import command

    command(args)


def cmd_course(args) -> None:
    from teachspec.course.materials import opening, write_course

    written = write_course(args.dest, force=args.force, solutions=args.with_solutions)
    print(f"wrote {len(written)} files into {args.dest}")
    if args.with_solutions:
        print("the assignments hold their solutions, for instructors only (INSTRUCTORS.md says how "
              "to grade them); students get `teachspec course DEST`")
    print(opening(args.dest))


def cmd_grading(args) -> None:
    from teachspec.course.release import nbgrader_course, otter_course, pytest_course

    lay_out = {"nbgrader": nbgrader_course, "otter": otter_course, "pytest": pytest_course}[args.grader]
    written = lay_out(args.dest, force=args.force)
    print(f"wrote {len(written)} files into {args.dest}, among them teachspec_grading.json: the course's secret, "
          f"for the grader only (never release it)")
    print({"nbgrader": f"then, for each assignment: cd {args.dest} && nbgrader generate_assignment NAME",
           "otter": f"then, for each assignment: otter assign {args.dest}/NAME/NAME.ipynb dist/NAME",
           "pytest": f"then put the submitted notebooks under {args.dest} and run: pytest {args.dest}"}[args.grader]
          + " (INSTRUCTORS.md has the rest)")


# -- the parser -------------------------------------------------------------------------------------------------

def command(sub, name: str, help: str) -> Parser:
    """A subcommand whose --help opens with the line the command list shows for it."""
    return sub.add_parser(name, help=help, description=description(help))


def parser() -> Parser:
    ap = Parser(prog="teachspec", description="Guessing several tokens at once: speculative decoding and "
                                              "RadixAttention, readable and measured.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    g = command(sub, "generate", help="continue a prompt with plain decoding on the target model (no draft: "
                                      "teachspec demo speculates)")
    g.add_argument("prompt", type=text, help="the text to continue")
    add_model_args(g, draft=False)
    add_sampling_args(g)
    g.add_argument("--stop", action="append", type=text, metavar="TEXT",
                   help="stop once the output contains TEXT (give it again for more stop texts)")
    g.set_defaults(run=cmd_generate, parser=g)

    d = command(sub, "demo", help="speculative decoding live in the terminal, coloured by decision")
    d.add_argument("prompt", nargs="?", type=text, default="The \"with\" statement is used to",
                   help="the text to continue (default: a sentence about the with statement)")
    add_model_args(d)
    add_sampling_args(d)
    d.add_argument("--speculate", type=speculation(*SPECULATE_CHOICES), default="model",
                   help="who guesses: model (default), eagle (the feature-level head), ngram, oracle, adversary, "
                        "or none for plain decoding")
    d.add_argument("--k", type=draft_length, default=2,
                   help="draft length (default 2), or adaptive, heuristic or confidence")
    d.add_argument("--colour", choices=["auto", "always", "never"], default="auto",
                   help="colour the decisions: auto (default: when printing to a terminal), always or never")
    d.set_defaults(run=cmd_demo, parser=d)

    b = command(sub, "bench", help="benchmarks: measured side by side in one run")
    bsub = b.add_subparsers(dest="bench", required=True, metavar="BENCH")
    bs = command(bsub, "speculative", help="plain vs transformers vs ours at each k, adaptive, prompt lookup")
    add_model_args(bs)
    bs.add_argument("--prompts", type=whole(1), default=12, help="prompts per workload (default 12)")
    bs.add_argument("--new-tokens", type=whole(1), default=96, help="tokens decoded per prompt (default 96)")
    bs.add_argument("--ks", type=whole(1), nargs="+", default=[1, 2, 3, 4],
                    help="draft lengths (default 1 2 3 4; k = 2 always runs: the events and noise-floor rows use it)")
    bs.add_argument("--seed", type=whole(0), default=0, help="random seed (default 0)")
    bs.add_argument("--workloads", nargs="+", metavar="NAME",
                    help="instead: every drafter (suffix and hybrid too) on multi-request workloads, requests in "
                         "order: agentic, code_edits, novel (--prompts, --ks and --seed do not apply)")
    bs.add_argument("--scale", type=whole(1), default=1, help="with --workloads: times their size (default 1)")
    add_json_arg(bs)
    bs.set_defaults(run=cmd_bench_speculative, parser=bs)

    bm = command(bsub, "mechanics", help="the engine's own cost: the oracle drafter on a config-built target")
    add_device_args(bm)
    bm.add_argument("--layers", type=whole(1), default=6, help="decoder layers of the random target (default 6)")
    bm.add_argument("--hidden", type=hidden_width, default=384, help="its width, a multiple of 64 (default 384)")
    bm.add_argument("--prompts", type=whole(1), default=8, help="random prompts (default 8)")
    bm.add_argument("--prompt-tokens", type=whole(1), default=64, help="tokens per prompt (default 64)")
    bm.add_argument("--new-tokens", type=whole(1), default=64, help="tokens decoded per prompt (default 64)")
    bm.add_argument("--ks", type=whole(1), nargs="+", default=[1, 2, 4, 8], help="draft lengths (default 1 2 4 8)")
    bm.add_argument("--seed", type=whole(0), default=0, help="random seed (default 0)")
    add_json_arg(bm)
    bm.set_defaults(run=cmd_bench_mechanics, parser=bm)

    br = command(bsub, "radix", help="prefix reuse: cache on vs off, fcfs vs lpm vs dfs, per workload")
    add_model_args(br)
    br.add_argument("--workloads", nargs="+",
                    default=["system_prompt", "few_shot", "multi_turn", "tree_of_thought", "no_reuse"],
                    help="workloads of teachspec.workloads (default: all five)")
    br.add_argument("--cache-tokens", type=whole(0), default=16384, help="the cache's budget in tokens (default "
                                                                          "16384)")
    br.add_argument("--rounds", type=whole(1), default=3, help="interleaved rounds to average (default 3)")
    br.add_argument("--speculate", type=speculation(*SPECULATE_CHOICES), default=None,
                    help=f"also speculate with a drafter: {', '.join(DRAFTERS)} (default: none, plain decoding)")
    add_json_arg(br)
    br.set_defaults(run=cmd_bench_radix, parser=br)

    bp = command(bsub, "program", help="structured programs (select, chat, fork, ReAct): radix cache on vs off")
    add_model_args(bp)
    bp.add_argument("--examples", nargs="+", default=["classify", "chat", "tree_of_thought", "react"],
                    help="example programs of teachspec.program.examples (default: all four)")
    bp.add_argument("--questions", type=whole(1), default=8, help="questions in the few-shot classify batch")
    bp.add_argument("--cache-tokens", type=whole(0), default=16384, help="the cache's budget in tokens (default "
                                                                          "16384)")
    bp.add_argument("--rounds", type=whole(1), default=2, help="interleaved rounds to average (default 2)")
    bp.add_argument("--speculate", type=speculation(*SPECULATE_CHOICES), default="model",
                    help=f"a drafter: {', '.join(DRAFTERS)} (default model), or none for plain decoding")
    bp.add_argument("--k", type=draft_length, default=2,
                    help="draft length (default 2), or adaptive, heuristic or confidence")
    add_json_arg(bp)
    bp.set_defaults(run=cmd_bench_program, parser=bp)

    bw = command(bsub, "widgets", help="tokens/s with live views attached against none")
    add_model_args(bw)
    bw.add_argument("--new-tokens", type=whole(1), default=64, help="tokens per generation (default 64)")
    bw.add_argument("--repeats", type=whole(1), default=5, help="runs of each, the median reported (default 5)")
    bw.set_defaults(run=cmd_bench_widgets, parser=bw)

    bc = command(bsub, "contention", help="plain and speculative decoding next to busy processes, with the "
                                            "thread policy and with torch's default threads")
    add_model_args(bc)
    bc.add_argument("--busy", type=whole(0), nargs="+", default=[0, 1, 2],
                    help="how many busy processes to run beside it, one row each (default 0 1 2)")
    bc.add_argument("--new-tokens", type=whole(1), default=64, help="tokens per generation (default 64)")
    bc.add_argument("--repeats", type=whole(1), default=3, help="generations of each, interleaved (default 3)")
    bc.add_argument("--k", type=whole(1), default=2, help="draft length of the speculative runs (default 2)")
    add_json_arg(bc)
    bc.set_defaults(run=cmd_bench_contention, parser=bc)

    bv = command(bsub, "serving", help="teachspec and vLLM on the bundled pair, greedy, side by side; vLLM's "
                                         "throughput with many requests")
    add_served_args(bv)
    bv.add_argument("--prompts", type=whole(1), default=8, help="prompts decoded one at a time (default 8)")
    bv.add_argument("--new-tokens", type=whole(1), default=96, help="tokens decoded per prompt (default 96)")
    bv.add_argument("--concurrency", type=whole(1), nargs="+", default=[8, 32],
                    help="requests in flight at once for vLLM's throughput rows (default 8 32)")
    add_json_arg(bv)
    bv.set_defaults(run=cmd_bench_serving, parser=bv)

    bb = command(bsub, "batch", help="speculation as the batch grows: the formula from this engine's pass costs "
                                     "against vLLM's throughput, plain and draft model, at each batch")
    add_served_args(bb)
    bb.add_argument("--prompts", type=whole(1), default=32, help="prompts, taken in turn by the batches (default 32)")
    bb.add_argument("--new-tokens", type=whole(1), default=64, help="tokens decoded per request (default 64)")
    bb.add_argument("--batches", type=whole(1), nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128],
                    help="requests in flight, increasing (default 1 2 4 ... 128; the sweep ends once speculation "
                         "has lost at two in a row)")
    bb.add_argument("--k", type=whole(1), default=3, help="the draft model's k (default 3)")
    bb.add_argument("--rounds", type=whole(1), default=4, help="rounds per server and batch; the fastest counts "
                                                               "(default 4)")
    add_json_arg(bb)
    bb.set_defaults(run=cmd_bench_batch, parser=bb)

    bt = command(bsub, "routing", help="one multi-tenant workload through every routing policy on vLLM replicas "
                                       "behind vllm-router: hit rate, tokens computed, TTFT, balance, beside the "
                                       "simulator")
    add_served_args(bt)
    bt.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES), metavar="POLICY",
                    help=f"the policies, each on a fresh cluster (default: all of {', '.join(POLICIES)})")
    bt.add_argument("--replicas", type=whole(1), default=2, help="vLLM replicas behind the router (default 2)")
    bt.add_argument("--kv-blocks", type=whole(33), default=64,
                    help="each replica's KV cache in 32-token blocks, at least one 1024-token request (default 64)")
    bt.add_argument("--concurrency", type=whole(1), default=8, help="requests in flight at once (default 8)")
    bt.add_argument("--requests", type=whole(1), default=96, help="requests in the workload (default 96)")
    bt.add_argument("--tenants", type=whole(1), default=10, help="tenants (default 10)")
    bt.add_argument("--zipf", type=number(0), default=0.3,
                    help="tenant t sends a share of the requests ~ 1 / (t + 1)^zipf; 0: all alike (default 0.3)")
    bt.add_argument("--system-tokens", type=whole(1), default=320,
                    help="tokens of each tenant's system prompt, the prefix its requests share (default 320)")
    bt.add_argument("--json", nargs="?", const=True, type=new_file, default=None, metavar="FILE",
                    help="alone: print the result as JSON instead of the table; with FILE: also write it there")
    bt.add_argument("--trace", type=new_file, default=None, metavar="FILE",
                    help="save each policy's events (replicas' blocks and counters, routes) to FILE with the "
                         "policy's name before its suffix: FILE.jsonl -> FILE.cache_aware.jsonl")
    bt.set_defaults(run=cmd_bench_routing, parser=bt)

    sv = command(sub, "serve", help="start vLLM's OpenAI-compatible server on a pair (prefix caching and KV "
                                    "events on), or replicas behind vllm-router, until Ctrl-C")
    sv.add_argument("--pair", type=served_pair, default="tiny",
                    help="tiny (default: the bundled pair) or a folder holding target/ and draft/")
    sv.add_argument("--speculate", type=speculation("none", *SERVED), default="none",
                    help="none (default), model (the pair's draft model) or ngram (prompt lookup)")
    sv.add_argument("--k", type=whole(1), default=3, help="guesses a step (default 3)")
    sv.add_argument("--port", type=whole(1), default=None, help="the HTTP port on 127.0.0.1 (default: a free one)")
    sv.add_argument("--kv-blocks", type=whole(2), default=None,
                    help="cap the KV cache at this many 32-token blocks, to watch it evict (default: vLLM's sizing)")
    sv.add_argument("--api-key", default=None, metavar="KEY",
                    help="answer /v1 only to requests with 'Authorization: Bearer KEY', for a shared machine "
                         "(default: $TEACHSPEC_API_KEY, else no key)")
    sv.add_argument("--replicas", type=whole(1), default=1,
                    help="start this many replicas behind vllm-router (default 1: one server, no router)")
    sv.add_argument("--router", choices=POLICIES, default=None, metavar="POLICY",
                    help=f"the router's policy: {', '.join(POLICIES)} (default with --replicas > 1: cache_aware; "
                         f"KV cache 64 blocks a replica unless --kv-blocks)")
    sv.set_defaults(run=cmd_serve, parser=sv)

    for name, run in (("student", cmd_student), ("traces", cmd_traces), ("pin", cmd_pin)):
        help, arguments = COURSE[name]
        course = command(sub, name, help=help)
        arguments(course)
        course.set_defaults(run=run, parser=course)

    c = command(sub, "course", help="write the course's notebooks, assignments and traces into a folder")
    c.add_argument("dest", nargs="?", type=Path, default=Path("teachspec-course"),
                   help="the folder to write into (default: teachspec-course/ in the current folder)")
    c.add_argument("--force", action="store_true", help="overwrite course files already in the folder")
    c.add_argument("--with-solutions", action="store_true",
                   help="write the assignments with their solutions, and INSTRUCTORS.md: the "
                        "instructor's copy, never for students (default: the student versions)")
    c.set_defaults(run=cmd_course, parser=c)

    g = command(sub, "grading", help="lay the assignments out for a grader, with the course's secret: nbgrader's "
                                     "course folder, Otter-Grader's master notebooks, or a folder pytest grades")
    g.add_argument("grader", choices=("nbgrader", "otter", "pytest"), help="the grader to lay the course out for")
    g.add_argument("dest", type=Path, help="the folder to write into (never inside teachspec's sources)")
    g.add_argument("--force", action="store_true",
                   help="overwrite the course's files already there (the secret is kept)")
    g.set_defaults(run=cmd_grading, parser=g)
    return ap


def main(argv: list[str] | None = None) -> None:
    args, rest = parser().parse_known_args(argv)
    command = args.parser  # the subcommand's own parser: its errors read `teachspec NAME: error: ...`
    if rest:
        command.error(f"unrecognized arguments: {' '.join(rest)}")
    if hasattr(args, "target"):
        check_models(args)
    try:
        args.run(args)
    except KeyboardInterrupt:
        if sys.stdout.isatty():
            print(flush=True)  # end the line a demo was printing
        command.exit(130, f"{command.prog}: interrupted\n")
    except (ValueError, TypeError, OSError) as e:  # bad input the parsers could not see: a missing model, ...
        command.exit(2, f"{command.prog}: error: {' '.join(str(e).split())}\n")


if __name__ == "__main__":
    main()
