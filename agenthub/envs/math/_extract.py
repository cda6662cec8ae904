"""Finding the final answer in a model's response. Pure text work, no SymPy."""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_GSM8K = re.compile(r"####\s*([-+]?\$?\s*[\d,]*\.?\d+)")
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*(.+?)\s*(?:\.\s|\.?$|\n)", re.IGNORECASE | re.DOTALL)
_NUMBER = re.compile(r"(?:[-+]?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?|[-+]?\.\d+)(?:\s*\\?%)?")


def boxed_contents(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` (or `\\fbox{...}`) in order, nested braces kept."""
    found = []
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:i].strip())
                    break
    return found


def _strip_number(text: str) -> str:
    text = text.replace("$", "").strip()
    # thousands separators only: "1,234,567" -> "1234567" but "1,2" (a tuple) stays
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
        text = text.replace(",", "")
    return text


def extract_answers(response: str) -> list[str]:
    """The candidate final answers of `response`, the one to grade last.

    In order of precedence: every `\\boxed{...}` (several means the response may be hedging,
    which the caller checks); the number after GSM8K's `####`; what follows the last "the
    answer is"; the last number in the text. Empty when nothing answer-like is found.
    """
    boxed = [b for b in boxed_contents(response) if b]
    if boxed:
        return boxed
    gsm8k = _GSM8K.findall(response)
    if gsm8k:
        return [_strip_number(gsm8k[-1])]
    stated = _ANSWER_IS.findall(response)
    if stated:
        return [stated[-1].strip().rstrip(".").strip()]
    numbers = _NUMBER.findall(response)
    if numbers:
        return [_strip_number(numbers[-1])]
    return []


def gold_from_gsm8k(answer: str) -> str:
    """The final answer of a GSM8K solution (the number after `####`)."""
    found = _GSM8K.findall(answer)
    if not found:
        raise ValueError(f"GSM8K answer has no '#### N' line: {answer[-80:]!r}")
    return _strip_number(found[-1])


def gold_from_math(solution: str) -> str:
    """The final answer of a MATH solution (its last `\\boxed{...}`)."""
    found = boxed_contents(solution)
    if not found:
        raise ValueError(f"MATH solution has no \\boxed{{...}} answer: {solution[-80:]!r}")
    return found[-1]
