"""verifiers environments (`vf.load_environment`, the classic `MultiTurnEnv`/`Rubric` API)
run unchanged by verifiers' own rollout loop, with agenthub as the model:
`agenthub.make("verifiers", env_id="my_env")`; and its `v1` tasksets, scored by their own
tasks: `agenthub.make("verifiers_v1", taskset="my_taskset")`. Needs the `verifiers` extra,
whose pins differ from agenthub's: give it a venv of its own."""

from agenthub.envs.verifiers._env import VerifiersEnv
from agenthub.envs.verifiers._v1 import VerifiersTasksetEnv

__all__ = ["VerifiersEnv", "VerifiersTasksetEnv"]
