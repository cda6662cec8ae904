"""Math problems checked by answer equivalence (math-verify), safe against hanging inputs.

`verify(response, gold)` is the public checker; the `math` env poses problems from the built-in
procedural generator or from GSM8K/MATH-style JSONL files and rewards verified answers.
"""

from __future__ import annotations

from agenthub.envs.math._datasets import read_math_jsonl
from agenthub.envs.math._env import MathEnv
from agenthub.envs.math._extract import extract_answers
from agenthub.envs.math._generator import generate_tasks
from agenthub.envs.math._pool import VerifierPool, VerifierPoolError, default_pool

__all__ = [
    "MathEnv",
    "VerifierPool",
    "VerifierPoolError",
    "averify",
    "default_pool",
    "extract_answers",
    "generate_tasks",
    "read_math_jsonl",
    "verify",
]


def verify(response: str, gold: str, *, timeout_s: float = 5.0) -> bool:
    """Whether the final answer in `response` is mathematically equal to `gold`.

    The answer is the last `\\boxed{...}` (nested braces allowed), else the number after
    GSM8K's `####` (thousands separators allowed), else what follows "the answer is", else the
    last number. A response with several boxed answers that disagree is hedging and is wrong,
    even if one of them is right. Equivalence is math-verify's: fractions, decimals, radicals,
    symbolic expressions, sets, intervals (bracket types matter), tuples (order matters);
    a percent sign means hundredths unless the gold is itself a percentage.

    Runs in a worker process of the shared `default_pool()`, killed and replaced if it takes
    longer than `timeout_s`; a timeout is a wrong answer. Safe to call from many threads.
    """
    return default_pool().verify(response, gold, timeout_s=timeout_s)


async def averify(response: str, gold: str, *, timeout_s: float = 5.0) -> bool:
    """The async twin of `verify`: waits without blocking the event loop."""
    return await default_pool().averify(response, gold, timeout_s=timeout_s)
