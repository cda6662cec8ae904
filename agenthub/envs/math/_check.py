"""The verification itself: extraction plus math-verify equivalence, in the calling process.

This is what each pool worker runs. It has no timeout of its own (math-verify's `signal.alarm`
timeouts cannot interrupt SymPy inside one huge integer operation); the pool hard-kills the
worker instead. Call it directly only on trusted inputs.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from agenthub.envs.math._extract import extract_answers

_PERCENT = re.compile(r"(.+?)\s*\\?%")
_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def quiet_math_verify() -> None:
    """Silence math-verify's per-call warnings (we time out from outside, on purpose)."""
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


@functools.lru_cache(maxsize=4096)
def _parse(answer: str) -> Any:
    return parse(
        f"\\boxed{{{answer}}}",
        extraction_config=_CONFIG,
        parsing_timeout=None,
    )


def _split_percent(text: str) -> tuple[str, bool]:
    match = _PERCENT.fullmatch(text)
    return (match.group(1), True) if match else (text, False)


def equivalent(gold: str, answer: str) -> bool:
    """Whether the extracted `answer` equals `gold`.

    Percentages count only where their reading is unambiguous: a percent sign in the answer
    means hundredths (`50%` equals `0.5`, not `50`), unless the gold is itself a percentage, in
    which case the bare count (`50`) or the ratio (`0.5`) are both accepted.
    """
    gold_number, gold_pct = _split_percent(gold)
    number, pct = _split_percent(answer)
    if gold_pct and pct:
        return _equal(gold_number, number)
    if pct:
        return _equal(gold, f"\\frac{{{number}}}{{100}}")
    if gold_pct:
        return _equal(gold_number, answer) or _equal(f"\\frac{{{gold_number}}}{{100}}", answer)
    return _equal(gold, answer)


def _equal(gold: str, answer: str) -> bool:
    parsed_gold, parsed = _parse(gold), _parse(answer)
    if not parsed_gold or not parsed:
        return False
    return bool(verify(parsed_gold, parsed, timeout_seconds=None))


def check(response: str, gold: str) -> bool:
    """Whether `response`'s final answer equals `gold` (see `agenthub.envs.math.verify`)."""
    answers = extract_answers(response)
    if not answers:
        return False
    final = answers[-1]
    # Several different boxed answers is hedging: all of them must say the same thing.
    for other in dict.fromkeys(answers[:-1]):
        if other != final and not equivalent(final, other):
            return False
    return equivalent(str(gold).strip(), final)
