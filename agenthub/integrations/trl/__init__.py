"""An agenthub env for TRL's `GRPOTrainer`: `train_dataset(env_id)` and
`EnvReward(env_id)`, so that `GRPOTrainer(train_dataset=..., reward_funcs=[...])` trains on
it. Nothing here imports TRL; `train_dataset` needs `datasets` (TRL's dependency)."""

from agenthub.integrations.trl._reward import EnvReward, train_dataset

__all__ = ["EnvReward", "train_dataset"]
