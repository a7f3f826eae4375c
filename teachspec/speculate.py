"""What `speculate=` may name: every drafter, the one list of them.

A drafter proposes the guesses a step verifies (teachspec/speculative/drafters.py explains each). What the rest of
the package needs to know about one is here, once, and the engine, the command line, programs, the serving
launcher and the k policies all read it:

    make         a fresh drafter for a pair: `make(pair, ngram, learnt)`, imported when first made, so that reading
                 the registry (the command line does, to list the choices) costs no torch import; `learnt` is a
                 dict the engine keeps across requests, for what a drafter learns from one request for the next
                 (the suffix drafter's tree of earlier outputs)
    trees        it can propose several branches per position, so `tree=` shapes work with it
    dynamic      it ranks its own probabilities, so it can grow EAGLE-2's dynamic tree (`tree="dynamic"`)
    needs        what the pair must hold besides the target: "draft" (a draft model), "eagle" (an EAGLE head) or
                 None, with the advice its error gives when the pair lacks it
    start_k      the constant k a cold adaptive policy starts from: the best constant k (or close to it) in the
                 bench runs on 2 CPU cores (teachspec/bench/README.md)
    served       vLLM serves it too (`start_vllm(speculate=...)`, `teachspec serve`): SERVED lists them
    title        what a table calls it; "" for the teaching devices (the oracle, the adversary), which the
                 benches leave out

Adding a drafter is a class with the drafter interface and one line in DRAFTERS. `speculate=None` is plain
decoding: no drafter, k = 0.

`Speculation` is how one request guesses, `speculate=`, `k=`, `tree=` and `ngram=` as one value, checked once
when it is made: the engine makes one from `generate`'s keywords, programs and the command line make theirs the
same way, and everything past that point trusts it. What only a pair can say (whether it has the draft model the
drafter needs, whether a tree's pass fits in the device's memory) is checked where the pair is, in the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TREE_NAMES = ("adaptive", "dynamic")  # tree= besides a shape: learnt shapes, EAGLE-2's tree (tree_policy.py)


@dataclass(frozen=True, slots=True)
class DrafterSpec:
    name: str
    make: Callable[[Any, int, dict], Any]  # (pair, ngram, learnt) -> a Drafter
    trees: bool = False
    dynamic: bool = False
    needs: str | None = None
    start_k: int = 3
    served: bool = False
    title: str = ""


def _model(pair, ngram: int, learnt: dict):
    from teachspec.speculative.drafters import ModelDrafter
    return ModelDrafter(pair.draft, pair.vocab_size)


def _eagle(pair, ngram: int, learnt: dict):
    from teachspec.speculative.eagle import EagleDrafter
    return EagleDrafter(pair.eagle, pair.target, pair.vocab_size)


def _ngram(pair, ngram: int, learnt: dict):
    from teachspec.speculative.drafters import NgramDrafter
    return NgramDrafter(n_max=ngram)


def _oracle(pair, ngram: int, learnt: dict):
    from teachspec.speculative.drafters import OracleDrafter
    return OracleDrafter(pair.target, pair.vocab_size)


def _adversary(pair, ngram: int, learnt: dict):
    from teachspec.speculative.drafters import AdversarialDrafter
    return AdversarialDrafter(pair.draft, pair.vocab_size)


def _suffix(pair, ngram: int, learnt: dict):
    from teachspec.speculative.suffix import SuffixCache, SuffixDrafter
    return SuffixDrafter(learnt.setdefault("suffix", SuffixCache()))


def _hybrid(pair, ngram: int, learnt: dict):
    from teachspec.speculative.drafters import ModelDrafter
    from teachspec.speculative.suffix import HybridDrafter, SuffixCache, SuffixDrafter
    return HybridDrafter(SuffixDrafter(learnt.setdefault("suffix", SuffixCache())),
                         ModelDrafter(pair.draft, pair.vocab_size))


DRAFTERS: dict[str, DrafterSpec] = {spec.name: spec for spec in (
    DrafterSpec("model", _model, trees=True, dynamic=True, needs="draft", start_k=3, served=True,
                title="draft model"),
    DrafterSpec("eagle", _eagle, trees=True, dynamic=True, needs="eagle", start_k=5, title="EAGLE head"),
    DrafterSpec("ngram", _ngram, trees=True, start_k=8, served=True, title="prompt lookup"),
    DrafterSpec("oracle", _oracle, trees=True, dynamic=True, start_k=8),
    DrafterSpec("adversary", _adversary, needs="draft"),
    DrafterSpec("suffix", _suffix, trees=True, start_k=16, served=True,  # no draft pass: long guesses pay
                title="suffix"),
    DrafterSpec("hybrid", _hybrid, trees=True, needs="draft", start_k=3,  # the draft model's; the trees go to 16
                title="hybrid"),
)}

SERVED = tuple(name for name, d in DRAFTERS.items() if d.served)

NEEDS = {  # what the pair lacks -> how to give it one
    "draft": "a draft model, and this pair has none; load one with load_pair(target=..., draft=...) or use "
             "speculate='ngram'",
    "eagle": "an EAGLE head trained for this target, and this pair has none; load one with load_pair(..., "
             "eagle='path/to/head') (`python -m teachspec.tools.train --stage eagle` trains one) or use "
             "speculate='model'",
}


def spec(speculate: str | None) -> DrafterSpec | None:
    """The drafter `speculate` names (None for plain decoding), or a ValueError naming the choices."""
    if speculate is None:
        return None
    if not isinstance(speculate, str) or speculate not in DRAFTERS:
        raise ValueError(f"speculate={speculate!r} is not a drafter; use one of {[*DRAFTERS, None]}")
    return DRAFTERS[speculate]


def make(speculate: str | None, pair, ngram: int = 3, learnt: dict | None = None):
    """A fresh drafter for `speculate` on `pair` (None for plain decoding), refused when the pair lacks what it
    needs; `learnt` is what the engine keeps for drafters across requests (a new dict: nothing carried over)."""
    drafter = spec(speculate)
    if drafter is None:
        return None
    lacks = {"draft": pair.draft is None, "eagle": getattr(pair, "eagle", None) is None}.get(drafter.needs, False)
    if lacks:
        raise ValueError(f"speculate={speculate!r} needs {NEEDS[drafter.needs]}")
    return drafter.make(pair, ngram, {} if learnt is None else learnt)


def start_k(speculate: str | None) -> int:
    """The constant k a cold adaptive policy for `speculate` starts from (3 for a name not registered)."""
    return DRAFTERS[speculate].start_k if speculate in DRAFTERS else 3


@dataclass(frozen=True, slots=True)
class Speculation:
    """How a request guesses, checked once when made (every bad value raises a ValueError or TypeError that names
    it, before anything runs):

        speculate   a drafter's name in DRAFTERS, or None for plain decoding
        k           guesses per step: an int >= 0, a policy's name ("adaptive", "heuristic", "confidence") or a
                    policy object (teachspec/speculative/policies.py); plain decoding guesses none, whatever k says
        tree        None (a chain), a shape (the most children a node may have at each depth, e.g. (3, 2, 2, 1):
                    1 to 16 depths of 1 to 16 children), "adaptive" (learnt shapes) or "dynamic" (EAGLE-2's tree);
                    only a drafter marked `trees` can guess a tree, and only one marked `dynamic` grow EAGLE-2's
        ngram       the longest n-gram prompt lookup matches (speculate="ngram"), an int >= 1
    """
    speculate: str | None = "model"
    k: Any = 2
    tree: tuple[int, ...] | str | None = None
    ngram: int = 3

    def __post_init__(self):
        from teachspec.validate import check_int
        from teachspec.speculative.policies import make_policy

        drafter = spec(self.speculate)
        make_policy(self.k)  # refuses a k that is neither a draft length nor a policy (its one check)
        check_int("ngram", self.ngram, 1)
        if self.tree is None:
            return
        if self.tree not in TREE_NAMES and (not isinstance(self.tree, (tuple, list)) or not 1 <= len(self.tree) <= 16
                                            or not all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 16
                                                       for b in self.tree)):
            raise ValueError(f"tree must be None, 'adaptive', 'dynamic' or a tuple of 1 to 16 branching factors, "
                             f"each an int in [1, 16], got {self.tree!r}")
        if drafter is None or not drafter.trees:
            raise ValueError(f"tree={self.tree!r} needs a drafter that can propose several branches: "
                             f"{', '.join(repr(name) for name, d in DRAFTERS.items() if d.trees)}; got "
                             f"speculate={self.speculate!r}")
        if self.tree == "dynamic" and not drafter.dynamic:
            raise ValueError(f"tree='dynamic' ranks the drafter's own probabilities, and speculate={self.speculate!r} "
                             f"has none: use one of {[name for name, d in DRAFTERS.items() if d.dynamic]} with it, or "
                             f"a tree shape")
        if isinstance(self.tree, list):
            object.__setattr__(self, "tree", tuple(self.tree))  # frozen: a shape given as a list is kept as a tuple

    @property
    def drafter(self) -> DrafterSpec | None:
        """The registry's entry for the drafter (None for plain decoding)."""
        return spec(self.speculate)

    @property
    def adaptive_k(self) -> bool:
        """k is learnt from what the steps measure (an Adaptive policy the engine keeps across requests)."""
        return self.k == "adaptive" and self.speculate is not None
