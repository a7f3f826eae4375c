"""Speculative decoding: a draft proposes k tokens, the target checks them all in one pass.

`verify` is the acceptance rule of Leviathan et al. (2023) and Chen et al. (2023) as a pure function; the engine
around it only gathers p and q and rolls the caches back.
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

__all__ = [
    "PositionRecord",
    "Verdict",
    "acceptance_probability",
    "point_mass",
    "residual",
    "verify",
    "verify_batch",
]
