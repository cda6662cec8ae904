"""Stand-ins for the few OpenRLHF names that agent and reward files import.

Agent files start with `from openrlhf.utils.agent import AgentInstanceBase, ...`; OpenRLHF's
math reward example with `from openrlhf.utils import extract_boxed_answer, grade_answer`.
OpenRLHF itself pulls in DeepSpeed, vLLM and Ray at import, so when it is not installed we
register small stand-ins under those module names instead: the agent classes carry only what
agenthub reads (the agent instance class an executor was built with), the math utilities
decide as OpenRLHF's do (see `_openrlhf_math`). When OpenRLHF is installed, it is used.
A user's file importing anything else of OpenRLHF is told so by `missing_import`.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from agenthub.envs._openrlhf_math import extract_boxed_answer, grade_answer


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
        f"provides only openrlhf.utils.agent's {names}, to agent files, and openrlhf.utils's "
        "extract_boxed_answer and grade_answer, to agent and reward files. pip install "
        "openrlhf, or drop that import"
    )


def install(*, agent: bool = True) -> None:
    """Make `openrlhf.utils`'s math utilities importable and, with `agent`,
    `openrlhf.utils.agent`, unless the real OpenRLHF is installed."""
    if installed():
        return
    package = sys.modules.setdefault("openrlhf", _package("openrlhf"))
    utils = sys.modules.setdefault("openrlhf.utils", _package("openrlhf.utils"))
    package.utils = utils  # type: ignore[attr-defined]
    utils.extract_boxed_answer = extract_boxed_answer  # type: ignore[attr-defined]
    utils.grade_answer = grade_answer  # type: ignore[attr-defined]
    if agent and "openrlhf.utils.agent" not in sys.modules:
        module = types.ModuleType("openrlhf.utils.agent")
        for cls in _STAND_INS:
            setattr(module, cls.__name__, cls)
        utils.agent = module  # type: ignore[attr-defined]
        sys.modules["openrlhf.utils.agent"] = module


def _package(name: str) -> types.ModuleType:
    package = types.ModuleType(name)
    package.__path__ = []
    return package
