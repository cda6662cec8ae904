"""Tools for environment authors' own test suites."""

from agenthub.testing._check_env import DEFAULT_ACTIONS, acheck_env, check_env

__all__ = ["DEFAULT_ACTIONS", "acheck_env", "check_env"]
