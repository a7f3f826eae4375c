"""Shared fixtures: small transformers models built from configs (no hub, no download) and saved to disk.

The models themselves, and every other helper the tests share, are in tests/helpers/ (importable as `helpers`:
pyproject.toml puts tests/ on the path); a folder's own fixtures are in its conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.models import save_model
from teachspec import set_threads

set_threads(1)  # small models gain nothing from more threads


@pytest.fixture
def model_dir(tmp_path):
    """Factory: model_dir("llama", vocab_size=..., seed=...) -> a folder from_pretrained can open."""
    def make(arch: str, name: str | None = None, **kw) -> Path:
        return save_model(tmp_path / (name or arch), arch, **kw)
    return make


