"""Test setup: run every kernel in Triton's CPU interpreter (set before triton is imported)."""

import os

os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def generated():
    """Load a committed generated module by kernel name: ``generated("copy").copy(x)``."""
    from tilegen.runner import load_module

    cache = {}

    def load(name: str):
        if name not in cache:
            cache[name] = load_module(ROOT / "generated" / f"{name}.py")
        return cache[name]

    return load
