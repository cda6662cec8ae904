"""Stand-ins for the few OpenRLHF names an `agent_func.py` imports.

Agent files start with `from openrlhf.utils.agent import AgentInstanceBase, ...`. OpenRLHF
itself pulls in DeepSpeed, vLLM and Ray at import, so when it is not installed we register
these small classes under that module name instead; they carry only what agenthub reads (the
agent instance class an executor was built with). When OpenRLHF is installed, it is used.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any


class AgentInstanceBase:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return states


class AgentExecutorBase:
    """Accepts both `(agent_instance_cls)` and the old
    `(agent_instance_cls, max_steps, max_length, llm_engine, [hf_tokenizer,] result_queue)`."""

    def __init__(self, agent_instance_cls: type | None = None, *args: Any, **kwargs: Any) -> None:
        self.agent_instance_cls = agent_instance_cls


class MultiTurnAgentExecutor(AgentExecutorBase):
    pass


def install() -> None:
    """Make `openrlhf.utils.agent` importable, unless the real OpenRLHF is installed."""
    if "openrlhf.utils.agent" in sys.modules or importlib.util.find_spec("openrlhf") is not None:
        return
    package = types.ModuleType("openrlhf")
    package.__path__ = []
    utils = types.ModuleType("openrlhf.utils")
    utils.__path__ = []
    agent = types.ModuleType("openrlhf.utils.agent")
    for cls in (AgentInstanceBase, AgentExecutorBase, MultiTurnAgentExecutor):
        setattr(agent, cls.__name__, cls)
    package.utils = utils  # type: ignore[attr-defined]
    utils.agent = agent  # type: ignore[attr-defined]
    sys.modules.update(
        {"openrlhf": package, "openrlhf.utils": utils, "openrlhf.utils.agent": agent}
    )
