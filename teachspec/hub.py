"""Where a model named by a string comes from, found out in a second or two, before transformers starts loading.

A model is named by a local folder or by a Hugging Face hub id ("gpt2", "Qwen/Qwen2.5-0.5B"). transformers finds
out the hard way: with no network it retries the hub for about a minute before it says it is offline, and a
missing folder is reported as a hub id it could not resolve. `problem(source)` says at once what cannot work:

    a folder that does not exist          (a path: it starts with /, ., ~ or holds more than one /)
    a hub id that is not in the local cache, when HF_HUB_OFFLINE is set or the hub cannot be reached

and None for everything else (a folder that exists, a cached hub id, a hub id with the hub reachable). Nothing
heavy is imported: the command line calls it while it checks its arguments.
"""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # "gpt2", "Qwen/Qwen2.5-0.5B"
TIMEOUT_S = 3.0  # how long the hub may take to answer a connection before it counts as unreachable


def problem(source: str | Path) -> str | None:
    """Why `source` cannot be loaded, found without loading anything; None when it may work."""
    text = str(source)
    if Path(text).expanduser().exists():
        return None  # a folder: transformers says what is missing in it
    if isinstance(source, Path) or not HUB_ID.fullmatch(text):
        return "no such folder (a model is a local folder holding config.json and weights, or a hub id)"
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(text, "config.json"), str):
        return None  # downloaded before: transformers reads the cache
    fix = (f"download it on a machine with a network (`hf download {text}`) into the cache "
           f"({constants.HF_HUB_CACHE}), or pass a local folder")
    if constants.HF_HUB_OFFLINE:
        return f"a hub id that is not in the local cache, and HF_HUB_OFFLINE is set; {fix}"
    why = unreachable(constants.ENDPOINT)
    if why:
        return f"a hub id that is not in the local cache, and the hub cannot be reached from here ({why}); {fix}"
    return None


def unreachable(endpoint: str, timeout: float = TIMEOUT_S) -> str | None:
    """Why a TCP connection to `endpoint` (a URL) fails within `timeout` seconds, or None when it opens."""
    url = urlparse(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = []

    def connect() -> None:  # in a thread: name resolution takes no timeout of its own
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"{host}:{port}: {e.strerror or e}")

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return result[0] if result else f"{host}:{port}: no answer in {timeout:g} s"

