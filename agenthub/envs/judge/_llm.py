"""`LLMJudge`: a rubric prompt to any OpenAI-compatible chat endpoint, a score parsed back."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from agenthub._errors import AgentHubError
from agenthub.envs._http import HttpPolicy, JsonEndpoint, url_list

DEFAULT_RUBRIC = """You are grading a response to a task.

[Task]
{prompt}

[Reference answer, may be empty]
{reference}

[Response]
{response}

Grade the response for correctness and helpfulness on a scale from {min_score} to {max_score}.
Reply with JSON only: {"score": <number>, "reason": "<one sentence>"}"""
"""The rubric used when none is given. Placeholders: {prompt}, {response}, {reference},
{min_score}, {max_score}; any other braces are left as they are."""

PLACEHOLDERS = ("{prompt}", "{response}", "{reference}", "{min_score}", "{max_score}")
"""What a rubric may hold; {response} it must."""

EXAMPLE_BASE_URL = "http://host:8000/v1"

_SCORE_LINE = re.compile(r"\bscore\W{0,3}\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)


class JudgeError(AgentHubError):
    """The LLM judge could not be reached, or its reply held no usable score."""


@dataclass(frozen=True)
class Judgement:
    score: float
    """The judge's score, within [min_score, max_score]."""
    reason: str
    reply: str


def parse_judgement(reply: str, *, min_score: float, max_score: float) -> Judgement:
    """The score in a judge's reply: a JSON object with `score`, else a `score: N` line.

    Raises `JudgeError` when there is none or it is outside [min_score, max_score]: an
    unusable judgement is an error on the episode, never a silent 0.
    """
    score: Any = None
    reason = ""
    for candidate in reversed(_JSON_OBJECT.findall(reply)):
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict) and "score" in obj:
            score, reason = obj["score"], str(obj.get("reason", ""))
            break
    if score is None:
        lines = _SCORE_LINE.findall(reply)
        score = lines[-1] if lines else None
    try:
        value = float(score) if not isinstance(score, bool) and score is not None else None
    except (TypeError, ValueError):
        value = None
    excerpt = " ".join(reply.split())[:200]
    if value is None:
        raise JudgeError(
            f"the judge's reply holds no score (expected JSON with 'score' or a 'score: N' "
            f"line): {excerpt!r}. Make the rubric ask for that format."
        )
    if not min_score <= value <= max_score:
        raise JudgeError(
            f"the judge gave score {value:g}, outside [{min_score:g}, {max_score:g}]: {excerpt!r}"
        )
    return Judgement(value, reason, reply)


class LLMJudge:
    """Asks a chat model, served by any OpenAI-compatible server, to grade a response.

    `base_urls` are server roots such as `http://host:8000/v1` (several spread the load and
    are retried in turn). The rubric, which must hold `{response}`, is filled in, sent as one
    user message with temperature 0 and `max_tokens`, and the reply parsed by
    `parse_judgement`. Failures raise `JudgeError`; one for a reply cut at `max_tokens` says so.
    """

    def __init__(
        self,
        base_urls: str | Sequence[str],
        model: str,
        *,
        rubric: str = DEFAULT_RUBRIC,
        min_score: float = 0.0,
        max_score: float = 10.0,
        api_key: str | None = None,
        max_tokens: int = 512,
        policy: HttpPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        bases = url_list(base_urls, argument="base_urls", example=EXAMPLE_BASE_URL)
        if min_score >= max_score:
            raise ValueError(f"min_score {min_score} must be below max_score {max_score}")
        if "{response}" not in rubric:
            raise ValueError(
                "the rubric has no {response} placeholder, so the judge would never see the "
                f"response it grades; a rubric may use {', '.join(PLACEHOLDERS)}"
            )
        self.model = model
        self.rubric = rubric
        self.min_score = min_score
        self.max_score = max_score
        self.max_tokens = max_tokens
        self._endpoint = JsonEndpoint(
            [b.rstrip("/") + "/chat/completions" for b in bases],
            policy or HttpPolicy(),
            service="judge server",
            error=JudgeError,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            transport=transport,
        )

    def render(self, prompt: str, response: str, reference: str) -> str:
        fields = {  # the keys are PLACEHOLDERS
            "{prompt}": prompt,
            "{response}": response,
            "{reference}": reference,
            "{min_score}": f"{self.min_score:g}",
            "{max_score}": f"{self.max_score:g}",
        }
        pattern = re.compile("|".join(re.escape(k) for k in fields))
        return pattern.sub(lambda m: fields[m.group(0)], self.rubric)

    async def judge(self, prompt: str, response: str, reference: str = "") -> Judgement:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": self.render(prompt, response, reference)}],
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }

        # parsed inside post: only usable judgements are cached
        return await self._endpoint.post(body, self._judgement)

    def _judgement(self, url: str, payload: Any) -> Judgement:
        reply, finish_reason = _reply(payload)
        cut = (
            f"the judge's reply was cut at max_tokens ({self.max_tokens}); raise it (the judge "
            "env's judge_max_tokens)"
        )
        if reply is None and finish_reason == "length":
            raise JudgeError(f"judge server {url}: {cut} before it gave any text")
        if reply is None:
            raise JudgeError(
                f"judge server {url} answered without choices[0].message.content: "
                f"{json.dumps(payload)[:200]}; is it an OpenAI-compatible chat endpoint?"
            )
        try:
            return parse_judgement(reply, min_score=self.min_score, max_score=self.max_score)
        except JudgeError as exc:
            if finish_reason == "length":
                raise JudgeError(f"{exc} ({cut})") from None
            raise

    async def aclose(self) -> None:
        await self._endpoint.aclose()


def _reply(payload: Any) -> tuple[str | None, Any]:
    """The reply's text (None without one) and its finish_reason."""
    try:
        choice = payload["choices"][0]
        content, finish_reason = choice["message"]["content"], choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None, None
    return (content if isinstance(content, str) else None), finish_reason
