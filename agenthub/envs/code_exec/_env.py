from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._tasks import TaskFiles
from agenthub.envs.code_exec._extract import extract_code
from agenthub.envs.code_exec._formats import read_code_tasks
from agenthub.envs.code_exec._generator import generate_tasks
from agenthub.envs.code_exec._harness import (
    FunctionTests,
    IOTests,
    TestReport,
    build_program,
    count,
    no_code_report,
    parse_spec,
    read_report,
)
from agenthub.sandbox import (
    ExecResult,
    ExecStatus,
    Limits,
    Sandbox,
    SandboxEngineError,
    SandboxError,
    SharedSandbox,
)


class CodeExecEnv(Env[list[Message]]):
    """The model writes Python; the sandbox runs it against the task's tests.

    Each reply's code (a fenced block, or the bare reply if it is code) is tested; if tests
    fail and turns remain, the env answers with the first failing test and the error's last
    lines, and the model tries again, up to `max_turns` attempts. The reward, given on the
    last step, is the fraction of tests the final attempt passed (`all_or_nothing=True`: 1 if
    all passed, else 0); `score` is 1 if all passed, for pass@k and filtering. What the code
    does (a crash, a timeout, a memory or output limit) is the model's and scores; the sandbox
    itself failing raises, so the episode is recorded as failed (`env_error`) instead of
    trained on as a zero: `SandboxEngineError` when the Docker engine stopped answering or
    restarted (`engine_lost`; the pool reconnects by itself for later episodes),
    `SandboxError` for any other `sandbox_error` (a container killed).

    Tasks: `dataset` (split `train`) and `eval_dataset` (`held_out`) JSONL files in MBPP,
    HumanEval or agenthub format (`task_format`), else the built-in procedural generator
    (`num_tasks` per split, `task_seed`).

    Sandbox: `backend` (`auto`: docker, then bwrap), shared by all instances in the process
    through one warm pool of `pool_size`. `sandbox=` takes any `Sandbox` instead (tests).
    """

    def __init__(
        self,
        *,
        dataset: str | None = None,
        eval_dataset: str | None = None,
        task_format: str = "auto",
        num_tasks: int = 1000,
        task_seed: int = 0,
        max_turns: int = 3,
        all_or_nothing: bool = False,
        backend: str = "auto",
        pool_size: int | None = None,
        timeout_s: float = 10.0,
        test_timeout_s: float = 2.0,
        memory_mb: int = 256,
        sandbox: Sandbox | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self._files = TaskFiles(dataset, eval_dataset)
        self._task_format = task_format
        self._num_tasks = num_tasks
        self._task_seed = task_seed
        self.max_turns = max_turns
        self.all_or_nothing = all_or_nothing
        self.test_timeout_s = test_timeout_s
        self.limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
        self.sandbox = sandbox or SharedSandbox(backend, limits=self.limits, pool_size=pool_size)
        self._spec: FunctionTests | IOTests | None = None
        self._turn = 0

    def tasks(self, split: str = "train") -> Iterable[Task]:
        path = self._files.of(split, self)
        if path is not None:
            return read_code_tasks(path, format=self._task_format)
        return generate_tasks(split, self._num_tasks, seed=self._task_seed)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.reseed(seed)
        self._spec = parse_spec(task.label)
        self._turn = 0
        return [], {"tests": count(self._spec), "max_turns": self.max_turns}

    async def step(self, action: str) -> Step[list[Message]]:
        spec = self._spec
        if spec is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self._turn += 1
        report = await self._test(spec, action)
        final = report.all_passed or self._turn >= self.max_turns
        info = {
            "turn": self._turn,
            "passed": sum(report.passed),
            "tests": len(report.passed),
            "status": report.status,
        }
        if not final:
            return Step([Message(role="user", content=self._feedback(report))], 0.0, info=info)
        self._spec = None
        reward = float(report.all_passed) if self.all_or_nothing else report.fraction
        return Step(
            [],
            reward,
            terminated=True,
            info=info,
            score=float(report.all_passed),
            extra_logs={
                "pass_fraction": report.fraction,
                "turns": float(self._turn),
            },
        )

    async def _test(self, spec: FunctionTests | IOTests, action: str) -> TestReport:
        entry = spec.entry_point if isinstance(spec, FunctionTests) else None
        code = extract_code(action, entry)
        if code is None:
            return no_code_report(spec)
        program = build_program(spec, code, self.test_timeout_s)
        # Every test may use its own timeout, plus start-up; never more than the sandbox limit.
        budget = min(self.limits.timeout_s, self.test_timeout_s * (count(spec) + 1) + 2.0)
        result = await self.sandbox.run(
            program.main,
            stdin=program.stdin,
            files=program.files,
            limits=Limits(timeout_s=budget, memory_mb=self.limits.memory_mb),
        )
        if result.sandbox_failed:
            # The code may not have run: a reward or feedback would blame the model for it.
            raise self._sandbox_failure(result)
        return read_report(spec, program, result)

    def _sandbox_failure(self, result: ExecResult) -> SandboxError:
        if result.status is ExecStatus.ENGINE_LOST:
            return SandboxEngineError(
                "the Docker engine was lost during this episode, so the code was not tested "
                f"(not the model's fault): {result.detail}. Later episodes reconnect by "
                "themselves once the engine answers; if they keep failing, check that dockerd "
                "runs and answers (`docker info`; scripts/setup.sh starts it)"
            )
        return SandboxError(
            f"the {self.sandbox.name} sandbox failed, so the code was not tested (not the "
            f"model's fault): {result.detail}. Check that the sandbox backend works "
            "(`agenthub sandbox run`)"
        )

    def _feedback(self, report: TestReport) -> str:
        left = self.max_turns - self._turn
        lines = [report.first_failure or "Some tests failed."]
        lines.append(
            f"Passed {sum(report.passed)} of {len(report.passed)} tests. "
            f"Reply with the whole corrected code in a ```python block "
            f"({left} attempt{'s' if left != 1 else ''} left)."
        )
        return "\n".join(lines)

    async def aclose(self) -> None:
        self._spec = None
        await self.sandbox.aclose()
