"""Remote judges: an LLM judge over any OpenAI-compatible endpoint, or a reward model over
HTTP (OpenRLHF's `/get_reward` protocol), behind one client layer with limits, retries and a
cache."""

from agenthub.envs._http import HttpPolicy
from agenthub.envs.judge._env import JudgeEnv
from agenthub.envs.judge._llm import (
    DEFAULT_RUBRIC,
    JudgeError,
    Judgement,
    LLMJudge,
    parse_judgement,
)

__all__ = [
    "DEFAULT_RUBRIC",
    "HttpPolicy",
    "JudgeEnv",
    "JudgeError",
    "Judgement",
    "LLMJudge",
    "parse_judgement",
]
