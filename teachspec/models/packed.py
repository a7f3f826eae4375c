"""Linear layers whose weights are packed once for the CPU's matrix kernels, so verifying costs what decoding does.

Speculation pays only because the target checks k + 1 guesses in one pass that costs about what a pass over one
token costs (Leviathan et al. 2023, Section 3.4, take it as given: a pass is bound by reading the weights, not by
arithmetic). On a CPU, PyTorch's float32 `nn.Linear` calls MKL, which turns one row into a matrix-vector product
but for two rows or more copies the whole weight matrix into its kernel's blocked layout on every call. On two
cores of this project's machines that made a pass of the bundled target over four tokens cost 1.5x a pass over
one, and capped what any draft could earn. oneDNN (the library behind `torch.backends.mkldnn`) can do that copy
once, ahead of time: with the packed weights a pass over one token took 2.6 ms instead of 5.0, and a pass over
four 1.15x that.

`pack(model)` changes how a model computes, never what: the parameters, the state dict and `isinstance(m,
nn.Linear)` stay as they were, a row's result does not depend on how many rows share the call, and a layer takes
`nn.Linear`'s own path whenever the packed one does not apply (gradients wanted, another device or dtype).

The same layer runs bfloat16 too, with oneDNN's bfloat16 kernel: half the bytes to read a pass, but fast only on
CPUs with native bfloat16 instructions (`bf16_pays`); elsewhere oneDNN emulates them, slower than float32. A
layer packs whichever of the two it computes in: `load_pair` packs float32 models, and running a model in bfloat16
is its owner's choice, made where it pays (the EAGLE head's `teachspec.models.eagle.lower`).
"""

from __future__ import annotations

import platform

import torch
from torch import nn

# Smaller layers stay with MKL: oneDNN spends ~10 us per call whatever the size, more than packing saves on them.
MIN_WEIGHTS = 2**17
# The packed copies sit beside the weights (which stay, for the state dict, tied weights and gradients), so by
# default a model is packed only while they fit easily in a laptop's memory.
MAX_COPY_BYTES = 2**30
DTYPES = (torch.float32, torch.bfloat16)  # the dtypes oneDNN's packed kernel runs here


def available() -> bool:
    """oneDNN's packed linear exists in this build of torch and runs on x86-64, the CPUs it was measured on."""
    return (torch.backends.mkldnn.is_available() and platform.machine().lower() in ("x86_64", "amd64")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def bf16_pays() -> bool:
    """Whether this CPU runs oneDNN's bfloat16 kernels natively (AVX512-BF16 or AMX); elsewhere they are emulated
    and slower than float32."""
    cpu = getattr(torch, "cpu", None)
    native = any(getattr(cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported",
                                                                   "_is_amx_tile_supported"))
    return available() and native


class PackedLinear(nn.Linear):
    """An `nn.Linear` that, for float32 or bfloat16 inference on the CPU (input and weight in the same one),
    multiplies by a copy of its weight packed for oneDNN.

    The copy is made on first use and made again when the weight is replaced (its storage changes) and, while
    `track_edits` holds, when it is edited in place (its version counter changes), so it never goes stale. A layer
    meant only for inference may skip the second check (`eagle.lower` does): it saves a read of the version counter
    per call (tracking every layer of the lowered EAGLE head cost 0.3 to 0.6% of its pass on 2 cores), and an
    in-place edit then goes unseen until the layer is packed again."""

    packed: torch.Tensor | None = None
    packed_from: tuple[int, int] = (0, -1)  # (data pointer, version or 0) of the weight the copy was made from
    track_edits: bool = True  # False: only a replaced weight is packed again, not one edited in place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype not in DTYPES or w.dtype != x.dtype:
            return super().forward(x)  # the packed kernel has no backward pass and no other device or dtype
        source = (w.data_ptr(), w._version if self.track_edits else 0)
        if self.packed is None or self.packed_from != source:
            with torch.inference_mode():
                self.packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
            self.packed_from = source
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def __getstate__(self) -> dict:
        """What `copy.deepcopy` and `pickle` see: the layer without its packed copy, an opaque oneDNN tensor that has
        no storage to copy. The copy is made again on the next forward pass."""
        state = super().__getstate__()
        state.pop("packed", None)
        state.pop("packed_from", None)
        return state


def pack(model: nn.Module, max_bytes: int | None = MAX_COPY_BYTES) -> nn.Module:
    """Make every large enough `nn.Linear` of `model` a `PackedLinear`, in place; return the model.

    The layer keeps its identity (its class is swapped, nothing is copied), so tied weights stay tied and hooks
    stay attached. A no-op where oneDNN's packed kernel is not available, or where the packed copies would take
    more than `max_bytes` (None: no limit): a 1.5B-parameter model in float32 would hold its 6 GB twice."""
    layers = [m for m in model.modules() if type(m) is nn.Linear and m.weight.numel() >= MIN_WEIGHTS]
    if not available() or (max_bytes is not None and sum(m.weight.nbytes for m in layers) > max_bytes):
        return model
    for module in layers:
        module.__class__ = PackedLinear
    return model


def unpack(model: nn.Module) -> nn.Module:
    """Undo `pack`, in place (to measure what packing does); return the model. Each layer keeps its dtype: a
    lowered bfloat16 layer (`eagle.lower`) becomes a plain bfloat16 `nn.Linear`, the same numbers up to the two
    kernels' rounding; and it forgets `track_edits`, so packing it again tracks edits."""
    for module in model.modules():
        if type(module) is PackedLinear:
            module.__class__ = nn.Linear
            module.packed = None  # free the copy; packing again makes a new one
            module.__dict__.pop("track_edits", None)
    return model
