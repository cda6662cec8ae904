"""An agenthub env as an OpenRLHF agent: `agenthub export openrlhf --env ID -o agent_func.py`
writes the `--agent_func_path` file, whose `AgentInstance` is `EnvAgent` over that env.
Nothing here imports OpenRLHF: the file does, where OpenRLHF runs it."""

from agenthub.integrations.openrlhf._agent import EnvAgent, Reward, feedback_text
from agenthub.integrations.openrlhf._export import agent_file

__all__ = ["EnvAgent", "Reward", "agent_file", "feedback_text"]
