"""agenthub environments handed to other trainers.

- `agenthub.integrations.openenv_server`: any agenthub env served over OpenEnv's wire
  protocol (HTTP and WebSocket sessions), the path for TRL, SkyRL, NeMo Gym and Unsloth
  through OpenEnv's own clients; `agenthub serve` runs it.
- `agenthub.integrations.openrlhf`: an OpenRLHF agent (`--agent_func_path`) playing an env;
  `agenthub export openrlhf` writes the file.
- `agenthub.integrations.verifiers`: `load_environment(env_id, **kwargs)`, a verifiers
  environment playing an env, for `vf-eval` and prime-rl.
- `agenthub.integrations.trl`: `train_dataset` and `EnvReward`, an env's tasks and rewards
  for TRL's `GRPOTrainer`; `EnvRollout`, its `rollout_func` for multi-turn envs.

Each integration imports its foreign package, if it needs one, only when used.
"""

__all__: list[str] = []
