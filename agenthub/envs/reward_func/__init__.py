"""The trivial single-turn environment: one response, scored by a reward function.

Runs OpenRLHF reward files unmodified (`reward_func(queries, prompts, labels)` or the older
`reward_func(queries, prompts)`), any Python callable, or a remote reward model speaking the
OpenRLHF HTTP protocol.
"""

from agenthub.envs.reward_func._env import RewardFuncEnv
from agenthub.envs.reward_func._function import RewardFunction, load_reward_func
from agenthub.envs.reward_func._output import RewardOutput
from agenthub.envs.reward_func._remote import RemoteRewardModel

__all__ = [
    "RemoteRewardModel",
    "RewardFuncEnv",
    "RewardFunction",
    "RewardOutput",
    "load_reward_func",
]
