from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from agenthub._env import Env
from agenthub._errors import AgentFuncError
from agenthub._tracebacks import described
from agenthub._types import Step, Task
from agenthub.envs._tasks import TaskFiles, read_jsonl_tasks, render_plain
from agenthub.envs.openrlhf_agent._load import load_agent_instance_class
from agenthub.envs.openrlhf_agent._loop import LoopThread
from agenthub.envs.reward_func._output import parse_reward_output


async def _construct(cls: Any) -> Any:
    init = cls.__init__
    if inspect.iscoroutinefunction(init):  # some OpenRLHF examples use `async def __init__`
        instance = object.__new__(cls)
        await init(instance)
        return instance
    return cls()


class OpenRLHFAgentEnv(Env[str]):
    """Multi-turn, text in and out: an unmodified OpenRLHF `agent_func.py` as an environment.

    Each episode gets a fresh `AgentInstance`, running on an event loop of its own so blocking
    code inside it never stalls other episodes. `reset` passes the prompt text and label;
    each `step` passes the conversation text so far and the model's reply, and the agent's
    `environment_feedback` becomes the observation (a file with only a module-level `step`
    runs through `StepFunctionAgent`, which turns its `next_observation` into that). A missing
    label is passed as "", as OpenRLHF does. `rewards`, `scores` and `extra_logs` may be
    tensors or numbers; `done` ends the episode. Per-step `sampling_params` returned by the
    agent are ignored: sampling is set by whoever runs the episodes.

    Tasks come from JSONL files as in the `reward_func` env.
    """

    def __init__(
        self,
        agent_func: str,
        *,
        dataset: str | None = None,
        eval_dataset: str | None = None,
        input_key: str = "prompt",
        label_key: str = "label",
    ) -> None:
        self._path = str(agent_func)
        self._cls = load_agent_instance_class(agent_func)
        self._files = TaskFiles(dataset, eval_dataset)
        self._keys = (input_key, label_key)
        self._loop: LoopThread | None = None
        self._agent: Any = None
        self._context = ""
        self._label: Any = None

    def tasks(self, split: str = "train") -> Iterable[Task]:
        path = self._files.of(split, self)
        if path is None:
            return super().tasks(split)
        return read_jsonl_tasks(path, input_key=self._keys[0], label_key=self._keys[1])

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.reseed(seed)
        self._agent = None
        if self._loop is None:
            self._loop = LoopThread(f"openrlhf-agent-{id(self):x}")
        prompt = render_plain(task)
        agent = await self._call("AgentInstance()", _construct(self._cls))
        # OpenRLHF hands agents "" when a sample has no label; files call label.strip() on it
        label = "" if task.label is None else task.label
        states = {"observation": prompt, "prompt": prompt, "label": label}
        result = await self._call("reset", agent.reset(states))
        observation = result.get("observation") if isinstance(result, Mapping) else None
        if not isinstance(observation, str) or not observation.startswith(prompt):
            raise AgentFuncError(
                f"{self._path}: AgentInstance.reset must return {{'observation': text}} where "
                f"the text starts with the prompt it was given; got {str(result)[:200]!r}"
            )
        self._agent, self._context, self._label = agent, observation, label
        return observation[len(prompt) :], {}

    async def step(self, action: str) -> Step[str]:
        if self._agent is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        states = {
            "observation_text": self._context,
            "action_text": action,
            "label": self._label,
            "sampling_params": None,
        }
        result = await self._call("step", self._agent.step(states))
        if not isinstance(result, Mapping) or "rewards" not in result:
            raise AgentFuncError(
                f"{self._path}: AgentInstance.step must return a dict with 'rewards', "
                f"'environment_feedback' and 'done'; got {str(result)[:200]!r}"
            )
        feedback = result.get("environment_feedback", "")
        if not isinstance(feedback, str):
            raise AgentFuncError(
                f"{self._path}: environment_feedback must be text, got {type(feedback).__name__}"
            )
        parsed = parse_reward_output(
            {k: result[k] for k in ("rewards", "scores", "extra_logs") if k in result},
            1,
            source=f"agent file {self._path}",
            samples=[repr(action[:60])],
            error=AgentFuncError,
        )
        reward, score, extra_logs = parsed.sample(0)
        done = bool(result.get("done", False))
        self._context += action + feedback
        if done:
            self._agent = None
        return Step(feedback, reward, terminated=done, score=score, extra_logs=extra_logs)

    async def _call(self, what: str, coroutine: Any) -> Any:
        assert self._loop is not None
        try:
            return await self._loop.run(coroutine)
        except AgentFuncError:
            raise
        except Exception as exc:
            raise AgentFuncError(
                f"{self._path}: AgentInstance {what} raised {described(exc)}"
            ) from exc

    async def aclose(self) -> None:
        self._agent = None
        if self._loop is not None:
            loop, self._loop = self._loop, None
            await loop.aclose()
