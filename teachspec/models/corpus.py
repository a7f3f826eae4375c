"""The training text for the bundled pair: Python's own documentation and source.

Everything comes from the interpreter that runs this file, so the pair can be rebuilt on a machine with no
network: the help topics in `pydoc_data.topics`, every docstring of the standard library (read with `ast`,
nothing is imported), and the standard library's source. Documents are split into train and validation by a
seeded hash of their name, so the split never depends on the order the files were found in.

The corpus differs between Python versions; that is why the trained weights and `tokenizer.json` are committed
rather than rebuilt.
"""

from __future__ import annotations

import ast
import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Packages whose text is mostly tests, generated tables or tooling rather than documentation.
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "ensurepip", "turtledemo", "site-packages", "__pycache__",
             "encodings", "unicodedata", "pydoc_data", "config-3"}
MIN_DOCSTRING_CHARS = 40
TOPIC_PIECE_CHARS = 2000  # help topics are long; cut them so the split can put pieces on both sides


@dataclass(frozen=True)
class Document:
    name: str  # stable identifier, e.g. "topic:assert/0" or "doc:json/decoder.py:JSONDecoder"
    kind: str  # "topic", "docstring" or "source"
    text: str


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = set(path.relative_to(root).parts[:-1])
        if parts & SKIP_DIRS or any(p.startswith(("test", "config-")) for p in parts):
            continue
        if path.name.startswith("test_"):
            continue
        files.append(path)
    return files


def topics() -> list[Document]:
    from pydoc_data.topics import topics as table

    docs = []
    for name in sorted(table):
        text = table[name].strip()
        for i in range(0, len(text), TOPIC_PIECE_CHARS):
            docs.append(Document(f"topic:{name}/{i // TOPIC_PIECE_CHARS}", "topic", text[i:i + TOPIC_PIECE_CHARS]))
    return docs


def docstrings() -> list[Document]:
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node)
                if text and len(text) >= MIN_DOCSTRING_CHARS:
                    label = getattr(node, "name", "<module>")
                    docs.append(Document(f"doc:{rel}:{label}:{getattr(node, 'lineno', 0)}", "docstring", text))
    return docs


def sources() -> list[Document]:
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in _stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, ValueError):
            continue
        docs.append(Document(f"src:{path.relative_to(root).as_posix()}", "source", text))
    return docs


def is_validation(doc: Document, val_fraction: float, seed: int) -> bool:
    """A document's side of the split depends only on its name and the seed."""
    h = hashlib.sha256(f"{seed}:{doc.name}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < val_fraction


def build(with_source: bool = True, val_fraction: float = 0.05, seed: int = 0) -> tuple[list[Document], list[Document]]:
    """Return (train, validation) documents."""
    docs = topics() + docstrings() + (sources() if with_source else [])
    train = [d for d in docs if not is_validation(d, val_fraction, seed)]
    val = [d for d in docs if is_validation(d, val_fraction, seed)]
    return train, val
