"""`agenthub export openrlhf`: the `--agent_func_path` file that plays an agenthub env."""

from __future__ import annotations

from typing import Any

from agenthub import __version__

__all__ = ["agent_file"]

TEMPLATE = '''\
"""OpenRLHF agent file: the agenthub env {env_id!r} as OpenRLHF's AgentInstance.

Written by `agenthub export openrlhf` (agenthub {version}). Pass it to OpenRLHF as
`--agent_func_path {name}`; agenthub must be installed where OpenRLHF's rollout workers run.
Each sample's prompt and label become the env's task; the env's feedback is appended after
each reply, and its reward, score and `done` end the episode.
"""

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agenthub.integrations.openrlhf import EnvAgent

ENV_ID = {env_id!r}
ENV_KWARGS = {env_kwargs!r}


class AgentInstance(EnvAgent, AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        super().__init__(ENV_ID, ENV_KWARGS)


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)
'''


def agent_file(env_id: str, env_kwargs: dict[str, Any], name: str = "agent_func.py") -> str:
    """The text of an OpenRLHF agent file playing `env_id` with `env_kwargs` (JSON values)."""
    return TEMPLATE.format(env_id=env_id, env_kwargs=env_kwargs, version=__version__, name=name)
