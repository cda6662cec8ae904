from __future__ import annotations

from pathlib import Path

import pytest

from agenthub.agents import ChatTokenizer
from tests.tiny_model import build_tokenizer


@pytest.fixture(scope="session")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    out: Path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    return ChatTokenizer.from_pretrained(out)
