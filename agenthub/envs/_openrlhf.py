"""Stand-ins for the few OpenRLHF names an `agent_func.py` imports.

Agent files start with `from openrlhf.utils.agent import AgentInstanceBase, ...`. OpenRLHF
itself pulls in DeepSpeed, vLLM and Ray at import, so when it is not installed we register
these small classes under that module name instead; they carry only what agenthub reads (the
agent instance class an executor was built with). When OpenRLHF is installed, it is used.
A user's file importing anything else of OpenRLHF is told so by `missing_import`.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
import types
from pathlib import Path
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


_STAND_INS = (AgentInstanceBase, AgentExecutorBase, MultiTurnAgentExecutor)


def installed() -> bool:
    """Whether the real OpenRLHF is importable, not only `install`'s stand-in."""
    try:
        return importlib.util.find_spec("openrlhf") is not None
    except ValueError:  # the stand-in, a module without a spec
        return False


def missing_import(exc: BaseException, path: Path) -> str | None:
    """When `exc` is a user's file importing more of OpenRLHF than the stand-in holds, OpenRLHF
    not being installed, what to say after the file's name: which import, and what to do.
    None for any other error, so that it is reported as it is."""
    if not isinstance(exc, ImportError) or (exc.name or "").partition(".")[0] != "openrlhf":
        return None
    if installed():
        return None
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename[:1] != "<"]
    where = f"an import of {exc.name}"
    if frames and frames[-1].line:  # the import statement, in the file or a module it imports
        frame = frames[-1]
        place = "" if Path(frame.filename) == path else f"{frame.filename} "
        where = f"{place}line {frame.lineno}, `{frame.line}`"
    names = ", ".join(cls.__name__ for cls in _STAND_INS[:-1]) + f" and {_STAND_INS[-1].__name__}"
    return (
        f"imports from OpenRLHF ({where}), which is not installed: without it, agenthub "
        f"provides only openrlhf.utils.agent's {names}, to agent files. pip install openrlhf, "
        "or drop that import"
    )


def install() -> None:
    """Make `openrlhf.utils.agent` importable, unless the real OpenRLHF is installed."""
    if "openrlhf.utils.agent" in sys.modules or installed():
        return
    package = types.ModuleType("openrlhf")
    package.__path__ = []
    utils = types.ModuleType("openrlhf.utils")
    utils.__path__ = []
    agent = types.ModuleType("openrlhf.utils.agent")
    for cls in _STAND_INS:
        setattr(agent, cls.__name__, cls)
    package.utils = utils  # type: ignore[attr-defined]
    utils.agent = agent  # type: ignore[attr-defined]
    sys.modules.update(
        {"openrlhf": package, "openrlhf.utils": utils, "openrlhf.utils.agent": agent}
    )
