from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_model import build_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight two-layer Qwen2 chat model with a ChatML template, built offline."""
    return build_model(tmp_path_factory.mktemp("tiny-model"))
