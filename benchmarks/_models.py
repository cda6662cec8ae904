"""The model a benchmark measures with: shared by the benchmark scripts (run as
`python benchmarks/NAME.py`, which puts this folder on the path)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def resolve_model(name: str, scratch: Path) -> Path:
    """`default` (the embedded model), `tiny` (the test suite's random model) or a path."""
    if name == "default":
        try:
            from agenthub.agents.default_model import (  # type: ignore[import-not-found,unused-ignore]
                ensure_default_model,
            )
        except ImportError:
            print("the embedded default model is not available; using the tiny test model")
            name = "tiny"
        else:
            path: Path = ensure_default_model()
            return path
    if name == "tiny":
        sys.path.insert(0, str(REPO))
        from tests.tiny_model import build_model

        return build_model(scratch / "tiny")
    return Path(name)
