from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Observation, Step, Task
from agenthub.envs._http import url_list
from agenthub.envs._tasks import (
    TaskFiles,
    read_jsonl_tasks,
    render_plain,
    scored_texts,
)
from agenthub.envs.reward_func._function import RewardFunction, load_reward_func
from agenthub.envs.reward_func._output import RewardOutput
from agenthub.envs.reward_func._remote import EXAMPLE_URL, RemoteRewardModel


class RewardFuncEnv(Env[Observation]):
    """Single-turn: the model answers once and a reward function scores the answer.

    Give exactly one scorer:

    - `reward_func`: a path to a Python file defining OpenRLHF's `reward_func`, or a callable
      with the same batch signature;
    - `remote_rm_url`: one URL, a list, or several in one string separated by commas, of
      reward servers speaking the OpenRLHF protocol. As in OpenRLHF, a `.py` path given here
      alone is treated as a reward file; one among URLs is refused.

    A reward file's function runs in `reward_processes` worker processes (default: up to 4,
    one per core), in their main thread as in OpenRLHF, so libraries that time out with
    `signal.alarm` (math-verify) work; `reward_processes=0` calls it in a thread of this
    process. A callable is always called in a thread.

    Tasks come from JSONL files: `dataset` (split `train`) and `eval_dataset` (`held_out`),
    with the prompt under `input_key` and the label under `label_key`.

    As in OpenRLHF, `prompts` passed to the scorer are the prompts as the model saw them (chat
    template applied) and `queries` the whole decoded sequence, prompt and reply, special
    tokens included. Stepped outside an agenthub runner (`check_env`, a test of your own),
    where no model's template is known, `prompts` are the prompts as text (chat messages as
    `role: content` lines) and `queries` that text followed by the reply.
    """

    def __init__(
        self,
        reward_func: str | Callable[..., Any] | None = None,
        remote_rm_url: str | list[str] | None = None,
        *,
        dataset: str | None = None,
        eval_dataset: str | None = None,
        input_key: str = "prompt",
        label_key: str = "label",
        rm_timeout_s: float = 30.0,
        rm_max_retries: int = 3,
        reward_processes: int | None = None,
    ) -> None:
        if (
            isinstance(remote_rm_url, str)
            and "," not in remote_rm_url
            and remote_rm_url.endswith(".py")
        ):
            reward_func, remote_rm_url = remote_rm_url, None
        if (reward_func is None) == (remote_rm_url is None):
            raise ValueError(
                "reward_func env needs exactly one of reward_func=PATH_OR_CALLABLE or "
                "remote_rm_url=URL(s)"
            )
        self._function: RewardFunction | None = None
        self._remote: RemoteRewardModel | None = None
        if remote_rm_url is not None and reward_processes is not None:
            raise ValueError(
                "reward_processes is for a reward file (reward_func=PATH); a remote reward "
                "server scores in its own processes"
            )
        if remote_rm_url is not None:
            urls = url_list(remote_rm_url, argument="remote_rm_url", example=EXAMPLE_URL)
            self._remote = RemoteRewardModel(
                urls, timeout_s=rm_timeout_s, max_retries=rm_max_retries
            )
        elif isinstance(reward_func, str):
            self._function = load_reward_func(reward_func, processes=reward_processes)
        else:
            assert reward_func is not None
            if reward_processes:
                raise ValueError(
                    f"reward_processes={reward_processes} needs a reward file: a Python callable "
                    "is called in a thread; give reward_func=PATH to score in processes"
                )
            self._function = RewardFunction(reward_func)
        self._files = TaskFiles(dataset, eval_dataset)
        self._input_key = input_key
        self._label_key = label_key
        self._task: Task | None = None
        self._prompt = ""

    def tasks(self, split: str = "train") -> Iterable[Task]:
        path = self._files.of(split, self)
        if path is None:
            return super().tasks(split)
        return read_jsonl_tasks(path, input_key=self._input_key, label_key=self._label_key)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self._task = task
        self._prompt = render_plain(task)
        empty: Observation = "" if isinstance(task.prompt, str) else list[Message]()
        return empty, {}

    async def step(self, action: str) -> Step[Observation]:
        task = self._task
        if task is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self._task = None
        # As in OpenRLHF, a task without a label is scored against "" (its datasets' default).
        label = "" if task.label is None else task.label
        query, prompt = scored_texts(self._prompt, action)
        output = await self._score([query], [prompt], [label], task)
        reward, score, extra_logs = output.sample(0)
        empty: Observation = "" if isinstance(task.prompt, str) else list[Message]()
        return Step(empty, reward, terminated=True, score=score, extra_logs=extra_logs)

    async def _score(
        self, queries: list[str], prompts: list[str], labels: list[Any], task: Task
    ) -> RewardOutput:
        if self._remote is not None:
            return await self._remote.score(queries, prompts, labels)
        assert self._function is not None
        return await self._function.ascore(
            queries, prompts, labels, sample_names=[f"task {task.id!r}"]
        )

    async def aclose(self) -> None:
        self._task = None
        if self._remote is not None:
            await self._remote.aclose()
