from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._http import HttpPolicy, url_list
from agenthub.envs._tasks import TaskFiles, read_jsonl_tasks, scored_texts
from agenthub.envs.judge._llm import DEFAULT_RUBRIC, EXAMPLE_BASE_URL, LLMJudge
from agenthub.envs.reward_func import RemoteRewardModel
from agenthub.envs.reward_func._remote import EXAMPLE_URL


def render_prompt(task: Task) -> str:
    """The prompt as text: a text prompt as is, chat messages as `role: content` lines."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "".join(f"{m.role}: {m.content}\n" for m in task.prompt)


class JudgeEnv(Env[list[Message]]):
    """Single-turn: the model answers once and a remote judge scores the answer.

    Give exactly one judge:

    - `judge_url` and `judge_model`: an LLM judge on any OpenAI-compatible server (one base URL
      such as `http://host:8000/v1`, a list, or several separated by commas). `rubric` is the
      grading prompt (see `DEFAULT_RUBRIC` for its placeholders); the reward is the parsed score
      scaled from [min_score, max_score] to [0, 1]. The judge's reply may be up to
      `judge_max_tokens` long. The API key is read from the environment variable named by
      `api_key_env`, if set.
    - `rm_url`: reward servers speaking OpenRLHF's `/get_reward` protocol (one URL, a list, or
      several separated by commas). Samples from concurrent episodes are sent together in
      batches of up to `max_batch_size`; a batch the server refuses is sent again a sample per
      request, so that one bad sample fails only its own episode. As in OpenRLHF, `query` is the
      whole decoded sequence (templated prompt, then the reply, special tokens kept) and
      `prompts` the templated prompt while a run steps the env; elsewhere the prompt as text and
      that text followed by the reply.

    Both share the client policy: `timeout_s` per attempt, `max_retries` with jittered backoff
    on timeouts, connection errors, 5xx, 408 and 429 (not another 4xx), `max_concurrency`
    requests in flight per event loop, `requests_per_minute`, and a cache of `cache_size`
    answers keyed by the request. A judge that fails or answers something unusable makes
    `step` raise `JudgeError` (LLM) or `RewardModelError` (reward model): a typed error on the
    episode, never a silent 0.

    Tasks come from JSONL files `dataset` (`train`) and `eval_dataset` (`held_out`), with the
    prompt under `input_key` and the reference answer (optional) under `label_key`.
    """

    def __init__(
        self,
        *,
        judge_url: str | list[str] | None = None,
        judge_model: str | None = None,
        rubric: str = DEFAULT_RUBRIC,
        min_score: float = 0.0,
        max_score: float = 10.0,
        api_key_env: str = "OPENAI_API_KEY",
        judge_max_tokens: int = 512,
        rm_url: str | list[str] | None = None,
        max_batch_size: int = 64,
        dataset: str | None = None,
        eval_dataset: str | None = None,
        input_key: str = "prompt",
        label_key: str = "label",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_concurrency: int = 16,
        requests_per_minute: float | None = None,
        cache_size: int = 4096,
    ) -> None:
        if (judge_url is None) == (rm_url is None):
            raise ValueError(
                "judge env needs exactly one of judge_url=URL (with judge_model=NAME) for an "
                "LLM judge or rm_url=URL for a /get_reward reward server"
            )
        policy = HttpPolicy(
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_concurrency=max_concurrency,
            requests_per_minute=requests_per_minute,
            cache_size=cache_size,
        )
        self._llm: LLMJudge | None = None
        self._rm: RemoteRewardModel | None = None
        if judge_url is not None:
            if not judge_model:
                raise ValueError("an LLM judge needs judge_model=NAME (the model the server runs)")
            self._llm = LLMJudge(
                url_list(judge_url, argument="judge_url", example=EXAMPLE_BASE_URL),
                judge_model,
                rubric=rubric,
                min_score=min_score,
                max_score=max_score,
                api_key=os.environ.get(api_key_env),
                max_tokens=judge_max_tokens,
                policy=policy,
            )
        else:
            assert rm_url is not None
            urls = url_list(rm_url, argument="rm_url", example=EXAMPLE_URL)
            self._rm = RemoteRewardModel(urls, policy=policy, max_batch_size=max_batch_size)
        self._files = TaskFiles(dataset, eval_dataset)
        self._input_key = input_key
        self._label_key = label_key
        self._task: Task | None = None

    def tasks(self, split: str = "train") -> Iterable[Task]:
        path = self._files.of(split, self)
        if path is None:
            return super().tasks(split)
        return read_jsonl_tasks(path, input_key=self._input_key, label_key=self._label_key)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        self._task = task
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        task = self._task
        if task is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self._task = None
        prompt = render_prompt(task)
        reference = "" if task.label is None else str(task.label)
        if self._llm is not None:
            judged = await self._llm.judge(prompt, action, reference)
            span = self._llm.max_score - self._llm.min_score
            reward = (judged.score - self._llm.min_score) / span
            logs = {"judge_score": judged.score}
            return Step(
                [], reward, terminated=True, info={"reason": judged.reason}, extra_logs=logs
            )
        assert self._rm is not None
        query, prompt = scored_texts(prompt, action)
        # As in OpenRLHF and the reward_func env, a task without a label is sent "".
        label = "" if task.label is None else task.label
        output = await self._rm.score_batched(query, prompt, label)
        reward, score, extra_logs = output.sample(0)
        return Step([], reward, terminated=True, score=score, extra_logs=extra_logs)

    async def aclose(self) -> None:
        self._task = None
        if self._llm is not None:
            await self._llm.aclose()
        if self._rm is not None:
            await self._rm.aclose()
