"""dockerd restarted under sandbox runs and code_exec episodes: runs that meet the gap get
`engine_lost` (their episodes `env_error`), later ones succeed on new containers, nothing is
left behind. The engine restarted is a real dockerd of the test's own (`_dockerd.PrivateEngine`),
so the tests using the machine's engine meanwhile are untouched."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from agenthub import Task
from agenthub.agents import ChatTokenizer, EpisodeRunner, FakeEngine, RolloutConfig, Trajectory
from agenthub.sandbox import DockerSandbox, ExecResult, ExecStatus, Limits
from agenthub.sandbox._docker import CONNECT_S, GRACE_S
from tests.code_tasks import function_task
from tests.integration import _dockerd
from tests.integration.test_sandbox_docker import containers_of
from tests.tiny_model import build_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ADD = function_task("add", "assert add(1, 2) == 3", "assert add(2, 2) == 4")
SOLVED = "```python\ndef add(a, b):\n    return a + b\n```"


class Restart:
    """Restarts dockerd in a thread after `delay_s`; `back_at` is when it answers again."""

    def __init__(self, engine: _dockerd.PrivateEngine, delay_s: float) -> None:
        self.engine = engine
        self.down_at = self.back_at = float("inf")
        self._thread = threading.Thread(target=self._run, args=(delay_s,), daemon=True)
        self._thread.start()

    def _run(self, delay_s: float) -> None:
        time.sleep(delay_s)
        self.down_at = time.monotonic()
        self.engine.stop()
        self.engine.start()
        self.back_at = time.monotonic()

    async def join(self) -> None:
        await anyio.to_thread.run_sync(self._thread.join)

    def wait(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


@pytest.fixture(scope="module")
def engine() -> Iterator[_dockerd.PrivateEngine]:
    with _dockerd.private_engine() as engine:
        yield engine


@pytest.fixture
def restarts(
    engine: _dockerd.PrivateEngine, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[Restart]]:
    """Restarts the test makes of its engine, which agenthub is pointed at; whatever happens,
    they end and the engine answers after."""
    monkeypatch.setenv("DOCKER_HOST", engine.host)
    made: list[Restart] = []
    with engine.restartable():
        try:
            yield made
        finally:
            for restart in made:
                restart.wait(timeout_s=150)


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    out: Path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    return ChatTokenizer.from_pretrained(out)


@pytest.mark.timeout(420)
async def test_sandbox_runs_and_code_exec_episodes_across_one_restart(
    restarts: list[Restart], engine: _dockerd.PrivateEngine, chat: ChatTokenizer
) -> None:
    """One restart for both users of the engine (a restart costs seconds the test only waits):
    bare sandbox runs, and code_exec episodes on a sandbox pool of their own."""
    had = _left_behind()
    limits = Limits(timeout_s=5)
    runs: list[tuple[float, float, ExecResult]] = []
    episodes: list[tuple[float, Trajectory]] = []
    async with DockerSandbox(pool_size=2, limits=limits) as sandbox:
        await sandbox.start()
        before = {channel.id for channel in sandbox._idle}
        restart = Restart(engine, delay_s=3)
        restarts.append(restart)
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(_run_until_after, sandbox, restart, runs)
            group.start_soon(_play_until_after, chat, restart, episodes)
        await restart.join()
        after = {channel.id for channel in sandbox._idle}
    _check_runs(runs, restart, limits)
    assert after and not after & before, "runs after the restart must use new containers"
    assert sandbox.live_containers() == 0
    _check_episodes(episodes, restart)
    assert _left_behind() <= had, "no container or process of this test is left"


async def _run_until_after(
    sandbox: DockerSandbox, restart: Restart, runs: list[tuple[float, float, ExecResult]]
) -> None:
    while time.monotonic() < restart.back_at + 8:
        started = time.monotonic()
        result = await sandbox.run("import time; time.sleep(0.2); print('ok')")
        runs.append((started, time.monotonic(), result))
        await anyio.sleep(0.1)


def _check_runs(
    runs: list[tuple[float, float, ExecResult]], restart: Restart, limits: Limits
) -> None:
    """Runs that met the gap got `engine_lost`, saying so; later ones succeeded; none hung."""
    statuses = [r.status for _, _, r in runs]
    assert set(statuses) <= {ExecStatus.OK, ExecStatus.ENGINE_LOST}, statuses
    lost = [r for _, _, r in runs if r.status is ExecStatus.ENGINE_LOST]
    assert lost, "no run met the engine's gap"
    assert all("Docker engine" in r.detail for r in lost), lost[0].detail
    late = [r for started, _, r in runs if started > restart.back_at + 1]
    assert late and all(r.ok and r.stdout == "ok\n" for r in late), late
    bound = limits.timeout_s + GRACE_S + CONNECT_S
    assert max(end - start for start, end, _ in runs) < bound


async def _play_until_after(
    chat: ChatTokenizer, restart: Restart, finished: list[tuple[float, Trajectory]]
) -> None:
    reply = [*chat.encode_text(SOLVED), chat.closing_ids[0]]
    runner = EpisodeRunner(
        FakeEngine(lambda prompt: reply, stop_token_ids=chat.stop_token_ids),
        chat,
        "code_exec",
        RolloutConfig(concurrency=3, n_samples_per_prompt=1),
        env_kwargs={"backend": "docker", "pool_size": 2, "max_turns": 1},
    )

    def work() -> Iterator[Task]:
        i = 0
        while time.monotonic() < restart.back_at + 8:
            i += 1
            yield ADD.model_copy(update={"id": f"add-{i}"})

    async def keep(trajectory: Trajectory) -> None:
        finished.append((time.monotonic(), trajectory))

    await runner.run(work(), on_trajectory=keep)


def _check_episodes(finished: list[tuple[float, Trajectory]], restart: Restart) -> None:
    """Episodes that met the gap are `env_error`s naming the engine, never a zero reward."""
    failed = [t for _, t in finished if t.error is not None]
    assert failed, "no episode met the engine's gap"
    for t in failed:
        assert t.error is not None and t.error.cause == "env_error", t.error
        assert "SandboxEngineError" in t.error.message and "Docker engine" in t.error.message
    scored = [t for _, t in finished if t.error is None]
    assert scored and all(t.reward == 1.0 for t in scored), "no episode may score a zero"
    late = [t for at, t in finished if at > restart.back_at + 3]
    assert late and all(t.error is None for t in late), [t.error for t in late]


def _left_behind() -> set[str]:
    """This process's containers and child processes. Earlier tests in the same run may own
    some (a shared pool, a server fixture): a test compares with what was there before it."""
    pid = os.getpid()
    return {c.id for c in containers_of(pid)} | set(_dockerd.children(pid))
