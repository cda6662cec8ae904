from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm_server import vllm_serve


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The embedded default model (built once and cached), which is what users serve first."""
    from agenthub.agents.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def vllm_server(default_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One `vllm serve` of the default model for the session: the eval runs that only need a
    model to answer use it through `--base-url` (see tests/vllm_server.py)."""
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with vllm_serve(default_model, log) as url:
        yield url
