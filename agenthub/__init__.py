"""agenthub: an asynchronous agentic RL environment hub for LLMs.

Write an environment by subclassing `Env`, register it through the `agenthub.envs` entry-point
group, check it with `agenthub.testing.check_env`, and build it anywhere with `make`.
"""

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

__version__ = "0.1.0"

__all__ = [
    "AgentFuncError",
    "AgentHubError",
    "CheckEnvError",
    "Env",
    "EnvArgumentsError",
    "EnvBuildError",
    "EnvNotFoundError",
    "EnvSpec",
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
    "list_envs",
    "make",
    "read_tasks",
    "register",
    "spec",
    "transcript",
]
