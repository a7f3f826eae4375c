"""Speculative decoding: a draft proposes k tokens, the target checks them all in one pass.

`verify` is the acceptance rule of Leviathan et al. (2023) and Chen et al. (2023) as a pure function; the engine
around it only gathers p and q and rolls the caches back. `verify_tree` is the same rule for a tree of guesses,
several per position (SpecInfer's multi-draft speculative sampling), checked in one pass.
"""

from teachspec.speculative.verify import (
    PositionRecord,
    Verdict,
    acceptance_probability,
    point_mass,
    residual,
    verify,
    verify_batch,
)
from teachspec.speculative.tree import NodeRecord, TokenTree, TreeVerdict, verify_children, verify_tree

__all__ = [
    "NodeRecord",
    "PositionRecord",
    "TokenTree",
    "TreeVerdict",
    "Verdict",
    "acceptance_probability",
    "point_mass",
    "residual",
    "verify",
    "verify_batch",
    "verify_children",
    "verify_tree",
]
