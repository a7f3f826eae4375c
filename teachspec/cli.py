"""The `teachspec` command.

    teachspec generate "def fibonacci(n):" --max-new-tokens 64      # plain decoding on the bundled target
"""

from __future__ import annotations

import argparse
import sys

from teachspec.models import load_pair


def add_model_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pair", default=None, help="a bundled pair name (default: tiny)")
    ap.add_argument("--target", default=None, help="a hub id or local folder (instead of --pair)")
    ap.add_argument("--draft", default=None, help="a hub id or local folder for the draft model")
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="teachspec", description="Guessing several tokens at once.")
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="continue a prompt with plain decoding on the target model")
    g.add_argument("prompt")
    add_model_args(g)
    add_sampling_args(g)
    g.set_defaults(run=cmd_generate)
    args = ap.parse_args(argv)
    try:
        args.run(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        ap.exit(2, f"teachspec {args.command}: error: {e}\n")


if __name__ == "__main__":
    main()
