"""Runs an unmodified OpenRLHF `agent_func.py` as a multi-turn agenthub environment.

`from openrlhf.utils.agent import ...` resolves without OpenRLHF installed. An `AgentInstance`
class runs (sync or `async def __init__`, at module level or through an `AgentExecutor` taking
no arguments or the old positional ones), and so does the first API's module-level
`async def step(observation, action, label, **kwargs)`; rewards may be tensors or floats. An
`AgentExecutor` overriding `execute` is refused: agenthub runs reset/step itself. So is a plain
`def` reset or step: OpenRLHF awaits them.
"""

from agenthub.envs.openrlhf_agent._env import OpenRLHFAgentEnv
from agenthub.envs.openrlhf_agent._load import load_agent_instance_class

__all__ = ["OpenRLHFAgentEnv", "load_agent_instance_class"]
