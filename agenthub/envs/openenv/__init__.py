"""OpenEnv environments as an agenthub env: a running server
(`agenthub.make("openenv", base_url="http://127.0.0.1:8000")`) or an `Environment` class in
this process (`env="package.module:Class"`). Needs the `openenv` extra, whose pins differ
from agenthub's: give it a venv of its own."""

from agenthub.envs.openenv._env import OpenEnvEnv

__all__ = ["OpenEnvEnv"]
