"""Where the models run: a checked device, a sensible default dtype for it, and a clock that waits for the device.

How many CPU threads run them is `teachspec/threads.py`.
"""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A torch.device that exists on this machine, or a ValueError that says which ones do."""
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from e
    available = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        available.append("mps")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: CUDA is not available on this machine; devices here: {available}")
        if (dev.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: there are {torch.cuda.device_count()} CUDA devices; "
                             f"devices here: {available}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r}: MPS is not available on this machine; devices here: {available}")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={device!r} is not supported; devices here: {available}")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """float32 on CPU (bfloat16 is slower there), bfloat16 on accelerators, unless asked otherwise."""
    if dtype is None:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype={dtype} is not supported; use one of {sorted(set(DTYPES))}")
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` to finish, so that a clock read next times it.

    A GPU runs kernels asynchronously: a forward pass returns as soon as its kernels are queued, and without this a
    timer would charge the pass's time to whatever next reads a result back. The CPU computes as it goes."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def available_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on `device`: the GPU's free memory, or on a CPU what Linux calls MemAvailable
    (what can be allocated without swapping); None where neither can be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
