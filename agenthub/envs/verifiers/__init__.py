"""verifiers environments (`vf.load_environment`, the classic `MultiTurnEnv`/`Rubric` API)
run unchanged by verifiers' own rollout loop, with agenthub as the model:
`agenthub.make("verifiers", env_id="my_env")`. Needs the `verifiers` extra, whose pins
differ from agenthub's: give it a venv of its own."""

from agenthub.envs.verifiers._env import VerifiersEnv

__all__ = ["VerifiersEnv"]
