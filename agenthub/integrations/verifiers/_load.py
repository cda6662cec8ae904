"""Which verifiers API `load_environment` builds for: the one place that reads the installed
verifiers' version."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from agenthub.envs.verifiers._bridge import legacy

__all__ = ["load_environment"]


def load_environment(env_id: str, **kwargs: Any) -> Any:
    """A verifiers environment playing agenthub's `env_id`, for the installed verifiers.

    verifiers 0.3.x (and earlier, which have its classic API): a classic `MultiTurnEnv`
    (see `classic_environment`). verifiers 0.4, which has only `verifiers.v1`: a v1 `Env`
    over an agenthub taskset (see `v1_environment`). Keyword arguments are the chosen
    builder's own, then the env's constructor arguments.
    """
    if classic_api_installed():
        from agenthub.integrations.verifiers._classic import classic_environment

        return classic_environment(env_id, **kwargs)
    v1 = importlib.import_module("agenthub.integrations.verifiers._v1")
    return v1.v1_environment(env_id, **kwargs)


def classic_api_installed() -> bool:
    """Whether the installed verifiers has the classic API (0.3 has it next to `v1`; 0.4
    has only `v1`). Without verifiers at all this raises the error naming the extra."""
    if importlib.util.find_spec("verifiers") is None or not _has("verifiers.v1"):
        legacy()  # raises with the install hint when verifiers is missing or too old
        return True
    return _has("verifiers.legacy") or _has("verifiers.envs")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
