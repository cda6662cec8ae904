"""agenthub: an asynchronous agentic RL environment hub for LLMs.

Write an environment by subclassing `Env`, register it through the `agenthub.envs` entry-point
group, check it with `agenthub.testing.check_env`, build it anywhere with `make`, and measure a
model on it with `evaluate`.
"""

import typing

from agenthub._env import Env
from agenthub._errors import (
    AgentFuncError,
    AgentHubError,
    CheckEnvError,
    EnvArgumentsError,
    EnvBuildError,
    EnvNotFoundError,
    NoTaskSourceError,
    PluginLoadError,
    RewardFuncError,
    RewardModelError,
    TaskFileError,
)
from agenthub._registry import list_envs, make, register, spec
from agenthub._spec import EnvSpec, WrapperSpec
from agenthub._transcript import Transcript, transcript
from agenthub._types import Message, Observation, Step, Task
from agenthub.envs._tasks import read_jsonl_tasks as read_tasks

if typing.TYPE_CHECKING:
    from agenthub.agents import EvalConfig, EvalSummary, aevaluate, evaluate

__version__ = "0.1.0"

# The policy side's names, imported when first used: `import agenthub` stays quick for an env.
_AGENTS = ("EvalConfig", "EvalSummary", "aevaluate", "evaluate")


def __getattr__(name: str) -> typing.Any:
    if name in _AGENTS:
        import agenthub.agents

        return getattr(agenthub.agents, name)
    raise AttributeError(f"module 'agenthub' has no attribute {name!r}")


__all__ = [
    "AgentFuncError",
    "AgentHubError",
    "CheckEnvError",
    "Env",
    "EnvArgumentsError",
    "EnvBuildError",
    "EnvNotFoundError",
    "EnvSpec",
    "EvalConfig",
    "EvalSummary",
    "Message",
    "NoTaskSourceError",
    "Observation",
    "PluginLoadError",
    "RewardFuncError",
    "RewardModelError",
    "Step",
    "Task",
    "TaskFileError",
    "Transcript",
    "WrapperSpec",
    "aevaluate",
    "evaluate",
    "list_envs",
    "make",
    "read_tasks",
    "register",
    "spec",
    "transcript",
]
