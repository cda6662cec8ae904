from __future__ import annotations

import copy
from pathlib import Path

import pytest

from agenthub.agents import ChatTokenizer
from tests.tiny_model import build_tokenizer


@pytest.fixture(scope="session")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    out: Path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    return ChatTokenizer.from_pretrained(out)


@pytest.fixture
def tool_chat(chat: ChatTokenizer) -> ChatTokenizer:
    """The test tokenizer with the default model's chat template, which shows tools."""
    from agenthub.agents.default_model._tokenizer import CHAT_TEMPLATE

    tokenizer = copy.copy(chat.tokenizer)
    tokenizer.chat_template = CHAT_TEMPLATE
    return ChatTokenizer(tokenizer)
