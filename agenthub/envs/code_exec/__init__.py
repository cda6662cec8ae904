"""`code_exec`: the model writes Python, the sandbox runs it against tests, failures come back
as feedback for another attempt; reward from the tests passed on the final attempt.

Tasks come from the built-in procedural generator (`generate_tasks`) or from MBPP- and
HumanEval-style JSONL files (`read_code_tasks`).
"""

from agenthub.envs.code_exec._env import CodeExecEnv
from agenthub.envs.code_exec._extract import extract_code
from agenthub.envs.code_exec._formats import read_code_tasks
from agenthub.envs.code_exec._generator import generate_tasks
from agenthub.envs.code_exec._harness import FunctionTests, IOCase, IOTests, TestReport, parse_spec

__all__ = [
    "CodeExecEnv",
    "FunctionTests",
    "IOCase",
    "IOTests",
    "TestReport",
    "extract_code",
    "generate_tasks",
    "parse_spec",
    "read_code_tasks",
]
