"""Theory: how many tokens a speculation step yields, and what that buys in wall time.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding", Section 3) model a step with
two numbers:

    alpha  the acceptance rate: the chance a drafted token is accepted, E[sum_x min(p(x), q(x))]
           (Corollary 3.6); for one position beta = sum(min(p, q)) = 1 - TV(p, q)
    c      the cost ratio: time of one draft forward pass / time of one target forward pass

Treating acceptances as independent with probability alpha, the step emits token i + 1 exactly when the first i
drafts were all accepted, which happens with probability alpha^i. Summing over i = 0 .. k gives Equation (1),

    E[tokens per step] = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)     (k + 1 when alpha = 1)

and since a step costs k draft passes plus one target pass, i.e. k c + 1 target passes, the expected wall-time
improvement over plain decoding is (Theorem 3.8)

    speedup = (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)).

Example: alpha = 0.8, c = 0.05, k = 4 gives 3.3616 tokens per step and a 2.80x speedup; the best k there is 8,
giving 3.09x.

Every function takes plain floats and returns a float; alpha and c may also be numpy arrays (elementwise).
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

FloatOrArray = float | np.ndarray  # alpha and c may be arrays, evaluated elementwise


def expected_tokens(alpha: FloatOrArray, k: int) -> FloatOrArray:
    """Expected tokens emitted per step with draft length k: (1 - alpha^(k+1)) / (1 - alpha), Eq. (1)."""
    a = _alpha(alpha)
    _k("k", k)
    # The geometric sum itself: no 0/0 at alpha = 1, where it gives k + 1.
    return _out(sum(a**i for i in range(k + 1)))


def speedup(alpha: FloatOrArray, k: int, c: FloatOrArray) -> FloatOrArray:
    """Expected wall-time improvement over plain decoding (Theorem 3.8); k = 0 is plain decoding, 1.0."""
    return _out(np.asarray(expected_tokens(alpha, k)) / (k * _c(c) + 1))


def optimal_k(alpha: FloatOrArray, c: FloatOrArray, k_max: int = 16) -> int | np.ndarray:
    """The draft length in 0 .. k_max with the largest speedup; ties go to the shorter draft.

    k = 0 (plain decoding) wins when drafting cannot pay for itself, e.g. when alpha <= c.
    """
    _k("k_max", k_max)
    speedups = np.stack([np.asarray(speedup(alpha, k, c)) for k in range(k_max + 1)])  # (k_max+1, ...)
    best = speedups.argmax(axis=0)
    return int(best) if best.ndim == 0 else best


def speedup_bound(alpha: FloatOrArray, c: FloatOrArray) -> FloatOrArray:
    """(1 + alpha) / (1 + c): the speedup of k = 1, a lower bound on the best speedup.

    Only meaningful when alpha > c (the corollary to Theorem 3.8): then some k beats plain decoding,
    and the best one does at least this well. When alpha <= c the value is <= 1 and drafting may not pay.
    """
    return _out((1 + _alpha(alpha)) / (1 + _c(c)))


def alpha_from_distributions(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """beta = sum(min(p, q)) over the last dim: the chance a token sampled from q is accepted (Corollary 3.6)."""
    if not isinstance(p, torch.Tensor) or not isinstance(q, torch.Tensor) or p.shape != q.shape:
        raise ValueError(
            f"p and q must be tensors of the same shape (..., vocab), got {_shape(p)} and {_shape(q)}"
        )
    return torch.minimum(p, q).sum(-1)


# -- checks ------------------------------------------------------------------------------------------------------

def _alpha(alpha: FloatOrArray) -> FloatOrArray:
    a = _number_array("alpha", alpha, "in [0, 1]")
    if not _all((a >= 0) & (a <= 1)):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    return a


def _c(c: FloatOrArray) -> FloatOrArray:
    a = _number_array("c", c, ">= 0 (draft pass time / target pass time)")
    if not _all(np.isfinite(a) & (a >= 0)):
        raise ValueError(f"c must be a finite number >= 0 (draft pass time / target pass time), got {c!r}")
    return a


def _k(name: str, k: int) -> None:
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 0:
        raise ValueError(f"{name} must be an int >= 0, got {k!r}")


def _number_array(name: str, x: FloatOrArray, allowed: str) -> FloatOrArray:
    """One number as a float, anything else as a float array."""
    if isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be a number {allowed}, got {x!r}")
    if isinstance(x, (int, float)):
        # stays a Python float: on one number numpy's per-call overhead would be most of the work, and the live
        # stats strip (widgets/measure.py) asks for a speedup at every step of a running generation
        return float(x)
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number {allowed}, got {x!r}") from None


def _all(mask: bool | np.ndarray) -> bool:
    return bool(mask.all()) if isinstance(mask, np.ndarray) else bool(mask)


def _out(x: FloatOrArray) -> FloatOrArray:
    """A float for scalar inputs, the array otherwise."""
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


def _shape(x: object) -> str:
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
