"""The exceptions agenthub raises. Each message says what was wrong and what to do."""

from __future__ import annotations

__all__ = [
    "AgentFuncError",
    "AgentHubError",
    "CheckEnvError",
    "EnvArgumentsError",
    "EnvBuildError",
    "EnvNotFoundError",
    "NoTaskSourceError",
    "PluginLoadError",
    "RewardFuncError",
    "RewardModelError",
    "TaskFileError",
]


class AgentHubError(Exception):
    """Base class of every error agenthub raises on purpose."""


class EnvNotFoundError(AgentHubError, LookupError):
    """No environment is registered under the requested id."""


class EnvArgumentsError(AgentHubError, TypeError, ValueError):
    """An environment's constructor rejected the arguments it was given. Also a `TypeError` and
    a `ValueError` (what constructors raise for them), so code catching those still does."""


class EnvBuildError(AgentHubError):
    """An environment's constructor failed for a reason other than its arguments (a missing
    data file, an unreachable service); the constructor's exception is the `__cause__`."""


class TaskFileError(AgentHubError, ValueError):
    """A task file is missing, or a line of it is not a task of the expected form."""


class PluginLoadError(AgentHubError, ImportError):
    """An environment's entry point could not be imported or does not export an `Env` (one
    whose `reset` and `step` are `async def`)."""


class NoTaskSourceError(AgentHubError):
    """The environment has no tasks of its own for the requested split."""


class CheckEnvError(AgentHubError, AssertionError):
    """`agenthub.testing.check_env` found the environment breaking the contract."""

    def __init__(self, env_name: str, problems: list[str]) -> None:
        self.env_name = env_name
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{env_name} breaks the agenthub Env contract:\n{lines}")


class AgentFuncError(AgentHubError):
    """An OpenRLHF agent file could not be loaded, raised, or returned something unusable."""


class RewardFuncError(AgentHubError):
    """A user reward function raised, or returned something that is not a reward."""


class RewardModelError(AgentHubError):
    """A remote reward model could not be reached or answered something unusable."""
