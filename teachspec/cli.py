"""The `teachspec` command.

    teachspec demo                                   # speculative decoding live in the terminal, then the stats
    teachspec generate "Return a new dictionary"     # plain decoding on the bundled target
    teachspec bench speculative --json out.json      # speedups measured side by side
    teachspec bench program                          # structured programs, radix cache on vs off
    teachspec student notebooks/assignments/a1_acceptance_rule.ipynb   # the student version of an assignment
    teachspec traces                                 # re-record the traces the notebooks replay
    teachspec pin notebooks/05_radix_attention.ipynb # run a notebook, keep only the outputs nbval checks
"""

from __future__ import annotations

import argparse
import sys

from teachspec.models import load_pair


def add_model_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pair", default=None, help="a bundled pair name (default: tiny)")
    ap.add_argument("--target", default=None, help="a hub id or local folder (instead of --pair)")
    ap.add_argument("--draft", default=None, help="a hub id or local folder for the draft model")
    add_device_args(ap)


def add_device_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--device", default=None, help="cpu (default), cuda, cuda:N or mps")
    ap.add_argument("--dtype", default=None, help="float32 (CPU default), bfloat16 (GPU default) or float16")


def add_sampling_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 (default) decodes greedily")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)


def pair_from(args):
    return load_pair(args.pair, target=args.target, draft=args.draft, device=args.device, dtype=args.dtype)


def cmd_generate(args) -> None:
    from teachspec.decode import generate

    out = generate(args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   top_k=args.top_k, top_p=args.top_p, seed=args.seed, pair=pair_from(args))
    s = out.stats
    print(args.prompt + out.text)
    print(f"\n-- {s.new_tokens} tokens in {s.wall_s:.3f} s: {s.tokens_per_s:.1f} tokens/s, "
          f"{s.target_passes} target passes, stopped by {out.finish_reason}", file=sys.stderr)


def parse_k(value: str):
    return int(value) if value.lstrip("-").isdigit() else value


def cmd_demo(args) -> None:
    from teachspec.demo import run

    run(pair_from(args), args.prompt, args.max_new_tokens, args.temperature, args.k, args.speculate, args.seed,
        colour=args.colour == "always" or (args.colour == "auto" and sys.stdout.isatty()))


def cmd_bench_speculative(args) -> None:
    from teachspec.bench import save, speculative
    from teachspec.workloads import copy_heavy, docs_completion

    pair = pair_from(args)
    docs = [pair.encode(r.prompt) for r in docs_completion(n_prompts=args.prompts).requests]
    # the passage's last new_tokens tokens are left out of the prompt: all that is decoded could be copied
    copy = [pair.encode(r.prompt) for r in copy_heavy(n_prompts=args.prompts, passage_tokens=args.new_tokens + 32,
                                                      max_new_tokens=args.new_tokens).requests]
    result = speculative.bench(pair, docs, copy, n=args.new_tokens, ks=args.ks, seed=args.seed)
    print(speculative.markdown(result))
    if args.json:
        save(result, args.json)


def cmd_bench_mechanics(args) -> None:
    from teachspec.bench import mechanics, save, speculative

    pair = mechanics.config_pair(mechanics.Shape(args.layers, args.hidden), args.device, args.dtype)
    result = mechanics.bench(pair, args.prompts, args.prompt_tokens, args.new_tokens, args.ks, args.seed)
    print(speculative.markdown(result))
    if args.json:
        save(result, args.json)


def cmd_bench_radix(args) -> None:
    from teachspec.bench import radix, save

    result = radix.bench(pair_from(args), names=args.workloads, cache_tokens=args.cache_tokens, rounds=args.rounds,
                         speculate=args.speculate)
    print(radix.markdown(result))
    if args.json:
        save(result, args.json)


def cmd_bench_program(args) -> None:
    from teachspec.bench import program, save

    speculate = None if args.speculate == "none" else args.speculate
    result = program.bench(pair_from(args), names=args.examples, rounds=args.rounds, cache_tokens=args.cache_tokens,
                           speculate=speculate, k=parse_k(args.k), questions=args.questions)
    print(program.markdown(result))
    if args.json:
        save(result, args.json)


def cmd_bench_widgets(args) -> None:
    from teachspec.bench.widgets import live_overhead

    pair = pair_from(args)
    for prompt in ("def main():", "Return a new dictionary"):
        print(f"{prompt!r}: {live_overhead(pair, prompt, max_new_tokens=args.new_tokens, repeats=args.repeats)}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="teachspec", description="Guessing several tokens at once.")
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="continue a prompt with plain decoding on the target model")
    g.add_argument("prompt")
    add_model_args(g)
    add_sampling_args(g)
    g.set_defaults(run=cmd_generate)

    d = sub.add_parser("demo", help="speculative decoding live in the terminal, coloured by decision")
    d.add_argument("prompt", nargs="?", default="The \"with\" statement is used to")
    add_model_args(d)
    add_sampling_args(d)
    d.add_argument("--speculate", default="model", help="model (default), ngram, oracle or adversary")
    d.add_argument("--k", type=parse_k, default=2, help="draft length, or adaptive / heuristic / confidence")
    d.add_argument("--colour", choices=["auto", "always", "never"], default="auto")
    d.set_defaults(run=cmd_demo)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True)
    bs = bsub.add_parser("speculative", help="plain vs transformers vs ours at each k, adaptive, prompt lookup")
    add_model_args(bs)
    bs.add_argument("--prompts", type=int, default=12)
    bs.add_argument("--new-tokens", type=int, default=96)
    bs.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4])
    bs.add_argument("--seed", type=int, default=0)
    bs.add_argument("--json", default=None, help="also write the results here")
    bs.set_defaults(run=cmd_bench_speculative)
    bm = bsub.add_parser("mechanics", help="the engine's own cost: the oracle drafter on a config-built target")
    add_device_args(bm)
    bm.add_argument("--layers", type=int, default=6, help="decoder layers of the random target (default 6)")
    bm.add_argument("--hidden", type=int, default=384, help="its width, a multiple of 64 (default 384)")
    bm.add_argument("--prompts", type=int, default=8)
    bm.add_argument("--prompt-tokens", type=int, default=64)
    bm.add_argument("--new-tokens", type=int, default=64)
    bm.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    bm.add_argument("--seed", type=int, default=0)
    bm.add_argument("--json", default=None, help="also write the results here")
    bm.set_defaults(run=cmd_bench_mechanics)
    br = bsub.add_parser("radix", help="prefix reuse: cache on vs off, fcfs vs lpm vs dfs, per workload")
    add_model_args(br)
    br.add_argument("--workloads", nargs="+",
                    default=["system_prompt", "few_shot", "multi_turn", "tree_of_thought", "no_reuse"])
    br.add_argument("--cache-tokens", type=int, default=16384)
    br.add_argument("--rounds", type=int, default=3)
    br.add_argument("--speculate", default=None, help="also speculate: model or ngram (default: no)")
    br.add_argument("--json", default=None, help="also write the results here")
    br.set_defaults(run=cmd_bench_radix)
    bp = bsub.add_parser("program", help="structured programs (select, chat, fork, ReAct): radix cache on vs off")
    add_model_args(bp)
    bp.add_argument("--examples", nargs="+", default=["classify", "chat", "tree_of_thought", "react"])
    bp.add_argument("--questions", type=int, default=8, help="questions in the few-shot classify batch")
    bp.add_argument("--cache-tokens", type=int, default=16384)
    bp.add_argument("--rounds", type=int, default=2)
    bp.add_argument("--speculate", default="model", help="model (default), ngram, or none for plain decoding")
    bp.add_argument("--k", default="2", help="draft length, or adaptive / heuristic / confidence")
    bp.add_argument("--json", default=None, help="also write the results here")
    bp.set_defaults(run=cmd_bench_program)
    bw = bsub.add_parser("widgets", help="tokens/s with live views attached against none")
    add_model_args(bw)
    bw.add_argument("--new-tokens", type=int, default=64)
    bw.add_argument("--repeats", type=int, default=5)
    bw.set_defaults(run=cmd_bench_widgets)
    for name, module, text in (("student", "teachspec.course.student", "write the student version of an assignment"),
                               ("traces", "teachspec.course.traces", "re-record the traces the notebooks replay"),
                               ("pin", "teachspec.course.pin", "run a notebook, keep only the outputs nbval checks")):
        sub.add_parser(name, help=text, add_help=False).set_defaults(run=None, module=module)
    args, rest = ap.parse_known_args(argv)
    if getattr(args, "module", None):  # these commands parse their own arguments
        import importlib

        return importlib.import_module(args.module).main(rest)
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        args.run(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        ap.exit(2, f"teachspec {args.command}: error: {e}\n")


if __name__ == "__main__":
    main()
