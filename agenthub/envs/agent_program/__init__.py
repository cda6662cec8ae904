"""`agent_program`: train an agent program that runs its own loop against an OpenAI client.

The program calls the model through an OpenAI-compatible endpoint that records every call's
exact tokens; see `AgentProgramEnv` and the manual's "Agent programs" page.
"""

from agenthub.envs.agent_program._env import AgentProgramEnv, ProgramError

__all__ = ["AgentProgramEnv", "ProgramError"]
