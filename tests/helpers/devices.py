"""A watch on tensor placement: every tensor factory that teachspec's own code calls without `device=` is recorded,
since on a GPU such a CPU tensor would meet the models' tensors in the next operation and fail there. Used by
tests/integration/test_devices.py (the engine) and tests/speculative/test_verify_tree.py (verify_tree)."""

from __future__ import annotations

import traceback

import torch
from torch.overrides import TorchFunctionMode

FACTORIES = {torch.tensor, torch.as_tensor, torch.rand, torch.randn, torch.randint, torch.arange, torch.full,
             torch.zeros, torch.ones, torch.empty}


class Placements(TorchFunctionMode):
    """Records each tensor factory that teachspec's own code calls without saying on which device."""

    def __init__(self):
        super().__init__()
        self.unplaced: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and "device" not in kwargs:
            caller = next(f for f in reversed(traceback.extract_stack()[:-1]) if "/torch/" not in f.filename)
            if "/teachspec/" in caller.filename:
                self.unplaced.append(f"torch.{func.__name__} at {caller.filename}:{caller.lineno}")
        return func(*args, **kwargs)
