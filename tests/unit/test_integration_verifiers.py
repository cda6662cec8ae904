"""`agenthub.integrations.verifiers` without verifiers installed says what to install. The
integration itself runs in verifiers' venv: tests/integration/hubs/test_integration_verifiers.py."""

from __future__ import annotations

import importlib.util

import pytest

from agenthub import AgentHubError
from agenthub.integrations.verifiers import load_environment


@pytest.mark.skipif(
    importlib.util.find_spec("verifiers") is not None, reason="verifiers is installed here"
)
def test_without_verifiers_loading_names_the_extra() -> None:
    with pytest.raises(AgentHubError, match=r"pip install 'agenthub\[verifiers\]'"):
        load_environment("math")
