"""Runs an unmodified OpenRLHF `agent_func.py` as a multi-turn agenthub environment.

`from openrlhf.utils.agent import ...` resolves without OpenRLHF installed; files written for
older and newer OpenRLHF versions both run (sync or `async def __init__`, `AgentExecutor` taking
no arguments or the old positional ones, rewards as tensors or floats).
"""

from agenthub.envs.openrlhf_agent._env import OpenRLHFAgentEnv
from agenthub.envs.openrlhf_agent._load import load_agent_instance_class

__all__ = ["OpenRLHFAgentEnv", "load_agent_instance_class"]
