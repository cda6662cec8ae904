"""An agenthub env as a verl agent loop (verl 0.9's `AgentLoopBase`), for multi-turn RL in verl.

Not tested in agenthub's CI (see docs/serve.md, "verl"): it is written against verl 0.9.1's
`verl.experimental.agent_loop` and agenthub's public episode runner.

Use: put this file on the Python path of verl's workers, import it once (so `@register` runs),
and give each dataset row `agent_name: "agenthub_env"` and, in `extra_info`, the task as JSON
under `agenthub_task` (`Task.model_dump_json()` of the env's tasks; the prompt column is the
task's chat messages). Set `AGENTHUB_ENV` (and `AGENTHUB_ENV_KWARGS`, JSON) in the workers'
environment. verl samples every reply through its own rollout servers; agenthub plays the
env, appends its answers as tokens (mask 0) and gives the episode's reward as
`reward_score`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from agenthub import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    Generation,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
)


class VerlServers(InferenceEngine):
    """verl's rollout servers (`server_manager.generate`) as an agenthub engine: token ids
    in, token ids and their logprobs out, one request id per episode (verl keeps an episode
    on one server for its prefix cache)."""

    def __init__(self, server_manager: Any, sampling_params: dict[str, Any], limit: int) -> None:
        self._servers = server_manager
        self._sampling = sampling_params
        self._limit = limit
        self._request_id = uuid4().hex

    @property
    def max_model_len(self) -> int:
        return self._limit

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        params = {**self._sampling, "max_tokens": sampling.max_tokens}
        out = await self._servers.generate(
            request_id=self._request_id, prompt_ids=list(prompt_ids), sampling_params=params
        )
        logprobs = out.log_probs or [0.0] * len(out.token_ids)
        return Generation(
            token_ids=tuple(out.token_ids),
            logprobs=tuple(logprobs),
            finish_reason="length" if len(out.token_ids) >= sampling.max_tokens else "stop",
            policy_version=self.policy_version,
        )


@register("agenthub_env")
class AgenthubAgentLoop(AgentLoopBase):
    """One agenthub episode per row: the env's turns until it ends or `multi_turn.max_
    assistant_turns` replies, the whole sequence cut at the rollout's `response_length`."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        rollout = self.rollout_config
        task = Task.model_validate_json(kwargs["extra_info"]["agenthub_task"])
        limit = rollout.prompt_length + rollout.response_length
        config = RolloutConfig(
            sampling=SamplingParams(max_tokens=rollout.response_length),
            max_turns=rollout.multi_turn.max_assistant_turns,
            max_tokens=limit,
            concurrency=1,
        )
        runner = EpisodeRunner(
            VerlServers(self.server_manager, sampling_params, limit),
            ChatTokenizer(self.tokenizer),
            os.environ["AGENTHUB_ENV"],
            config,
            env_kwargs=json.loads(os.environ.get("AGENTHUB_ENV_KWARGS", "{}")),
        )
        t = await runner.run_episode(task)
        start = t.loss_mask.index(1) if 1 in t.loss_mask else len(t.tokens)
        end = start + rollout.response_length
        return AgentLoopOutput(
            prompt_ids=t.tokens[:start],
            response_ids=t.tokens[start:end],
            response_mask=t.loss_mask[start:end],
            response_logprobs=t.logprobs[start:end],
            reward_score=t.reward,
            num_turns=2 * t.num_turns,
            metrics={},
            extra_fields={"agenthub_error": t.error.cause if t.error else None},
        )
