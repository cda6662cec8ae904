"""An agenthub env for TRL's `GRPOTrainer`.

- Single-reply envs: `train_dataset(env_id)` and `EnvReward(env_id)`, so that
  `GRPOTrainer(train_dataset=..., reward_funcs=[...])` trains on it.
- Multi-turn envs: `EnvRollout(env_id)` as `rollout_func`, with its `train_dataset()` and
  `env_reward` as the reward function; it plays whole episodes with agenthub's episode runner.

Nothing here imports TRL; the datasets need `datasets` (TRL's dependency), `EnvRollout`
torch and transformers (TRL's too)."""

from agenthub.integrations.trl._reward import EnvReward, train_dataset
from agenthub.integrations.trl._rollout import EnvRollout, env_reward

__all__ = ["EnvReward", "EnvRollout", "env_reward", "train_dataset"]
