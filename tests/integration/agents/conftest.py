from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_model import build_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight two-layer Qwen2 chat model with a ChatML template, built offline."""
    return build_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tied_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with its output layer tied to the input embeddings (as the default model)."""
    return build_model(tmp_path_factory.mktemp("tied-model"), tied=True)
