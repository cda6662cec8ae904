"""An agenthub env as a verifiers environment, for `vf-eval` and prime-rl:
`agenthub.integrations.verifiers.load_environment(env_id, **kwargs)`. Needs the `verifiers`
extra (verifiers 0.3's classic API) or verifiers 0.4 (its v1 API), imported when called."""

from agenthub.integrations.verifiers._load import load_environment

__all__ = ["load_environment"]
