"""The training loop's pure parts: config resolution, admission, the task stream, group triage,
the run directory and the reward plot. The loop itself runs on Ray in
tests/integration/trainer/test_train_cli.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub import AgentHubError, Env, Step, Task, register
from agenthub.trainer._advantages import advantages
from agenthub.trainer._assembly import Batch, BatchAssembler, FailedGroups, NoSignal, triage
from agenthub.trainer._checkpoint import Checkpointer
from agenthub.trainer._cluster import start_ray
from agenthub.trainer._config import (
    AlgorithmConfig,
    ConfigError,
    load_config,
)
from agenthub.trainer._control import RunControl, StopReason, interruptible
from agenthub.trainer._evaluation import (
    HeldOutEvaluator,
    HeldOutRewards,
    evaluated_line,
    held_out_reward,
)
from agenthub.trainer._learner import MODEL_CHECKPOINT
from agenthub.trainer._loop import Trainer
from agenthub.trainer._metrics import MetricsLog, plot_rewards, read_metrics
from agenthub.trainer._preflight import check_env
from agenthub.trainer._rundir import CheckpointState, RunDirectory, disk_full
from agenthub.trainer._workers import Admission, LearnerWorker, task_stream

from ._fakes import FakeCluster, held_out_summary
from ._fakes import trajectory as _trajectory

# -- config ------------------------------------------------------------------------------


def test_toml_files_then_overrides_win_in_order(tmp_path: Path) -> None:
    first = tmp_path / "a.toml"
    first.write_text(
        'env = "math"\n[learner]\nlr = 0.001\nzero_stage = 3\n[rollout]\nmax_turns = 2\n'
    )
    second = tmp_path / "b.toml"
    second.write_text("[learner]\nlr = 0.002\n")
    config = load_config(
        [first, second],
        [
            "rollout.max_turns=4",
            "env_kwargs.num_tasks=10",
            "ray.address=auto",
            "rollout.chat_template=false",
            'rollout.stop=["</search>", "</answer>"]',
        ],
    )
    assert config.env == "math"
    assert config.learner.lr == 0.002
    assert config.learner.zero_stage == 3  # kept from the first file
    assert config.rollout.max_turns == 4
    assert config.rollout.chat_template is False
    assert config.rollout.stop == ("</search>", "</answer>")
    assert config.env_kwargs == {"num_tasks": 10}
    assert config.ray.address == "auto"  # not JSON: taken as a string
    assert config.rollout.temperature == 1.0  # untouched defaults stay


def test_resolved_config_round_trips_as_the_base_of_a_resumed_run() -> None:
    config = load_config([], ["env=code_exec", "learner.lr=3e-4"])
    again = load_config([], ["run.max_steps=500"], base=json.loads(config.model_dump_json()))
    assert again.learner.lr == 3e-4
    assert again.run.max_steps == 500


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env=math", "learner.lrr=1"], "learner.lrr: there is no such setting"),
        (["env=math", "rollout.zzz=1"], "rollout.zzz: there is no such setting in rollout. "),
        (["env=math", "learner.lr=-1"], "learner.lr: Input should be greater than 0"),
        (["env=math", "algorithm.estimator=ppo"], "algorithm.estimator"),
        (["learner.lr=1"], "env: Field required"),
        (["env=math", "lr"], "is not KEY=VALUE"),
        (["env=math", "env.x=1"], "env is a value, not a section"),
        (["env=math", "algorithm.filter_low=0.9", "algorithm.filter_high=0.1"], "filter_low"),
        (["env=math", "learner.critic.lr=1e-4"], "trained only with algorithm.estimator=gae"),
        (["env=math", 'rollout.stop=[""]'], "rollout.stop.0: String should have at least 1"),
        (
            ["env=math", "rollout.n_samples_per_prompt=1"],
            "a group of one sample always is: no step would ever come; give "
            "rollout.n_samples_per_prompt of 2 or more, or set algorithm.filter_groups=false",
        ),
        (
            ["env=math", "rollout.n_samples_per_prompt=1", "algorithm.filter_groups=false"],
            "algorithm.estimator=group_norm measures each sample against the other samples",
        ),
        (["env=math", "learner.importance_low=4"], "learner.importance_low: Input should be less"),
        # pydantic alone reads true as 1: a run at temperature 1 nobody asked for
        (["env=math", "rollout.temperature=true"], "rollout.temperature: takes a number, not true"),
        (["env=math", "learner.zero_stage=false"], "learner.zero_stage: takes a number, not false"),
        (["env=math", "rollout.max_turns=true"], "rollout.max_turns: takes a number, not true"),
        (["env=math", "algorithm.estimator=gae", "learner.critic.lam=true"], "critic.lam: takes"),
    ],
)
def test_bad_config_says_which_field_and_why(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config([], overrides)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "rollout.stop=</s>",
            """rollout.stop: takes a list, got '</s>'; on the command line \
write it as JSON, for example rollout.stop='["</s>"]'""",
        ),
        (
            "env_kwargs=3",
            """env_kwargs: takes a table, got 3; on the command line write it \
as JSON, for example env_kwargs='{"key": 3}'""",
        ),
    ],
)
def test_a_lone_value_where_a_list_or_table_goes_shows_the_json_form(
    override: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config([], ["env=math", override])
    assert message in str(caught.value)
    # and the form it shows is one the command line takes
    key, _, _ = override.partition("=")
    shown = message.rsplit(f"{key}=", 1)[1].strip("'")
    assert load_config([], ["env=math", f"{key}={shown}"])


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("run.max_step=2", " (did you mean run.max_steps?)"),
        ("learner.critic.lrr=1", " (did you mean learner.critic.lr?)"),
        ("runn.max_steps=2", " (did you mean run?)"),
        # eval takes the env's arguments bare; train keeps them under env_kwargs
        ("num_tasks=10", "; an argument of the env goes under env_kwargs: env_kwargs.num_tasks=10"),
        (
            "max_turns=3",
            " (did you mean rollout.max_turns, or the env's argument, env_kwargs.max_turns=3?)",
        ),
        ("seed=3", " (did you mean run.seed, or the env's argument, env_kwargs.seed=3?)"),
    ],
)
def test_an_unknown_setting_names_the_one_meant(override: str, hint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config([], ["env=math", override])
    key = override.split("=")[0].split(".max_steps")[0]
    assert f"{key}: there is no such setting{hint}" in str(caught.value)


def test_bad_config_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config([tmp_path / "missing.toml"])
    broken = tmp_path / "broken.toml"
    broken.write_text("[learner\nlr = 1")
    with pytest.raises(ConfigError, match=r"broken\.toml is not valid TOML"):
        load_config([broken])


def test_overrides_may_stand_anywhere_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agenthub.cli import main

    argv = ["train", "--env", "math", "learner.lr=1e-4", "--steps", "3", "rollout.top_p=0.5"]
    assert main([*argv, "--print-config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["learner"]["lr"] == 1e-4 and config["rollout"]["top_p"] == 0.5
    assert config["run"]["max_steps"] == 3
    with pytest.raises(SystemExit):
        main([*argv, "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--env", "math", "--max-steps", "3"])
    said = capsys.readouterr().err  # by train's own parser, with the flag it resembles
    assert said.startswith("usage: agenthub train ")
    assert said.endswith("--max-steps: did you mean --steps?\n")


@pytest.mark.parametrize(
    ("env_id", "needs"),
    [("math", []), ("code_exec", ['env_kwargs.backend="unisolated"'])],
)
def test_the_env_kwargs_example_in_train_help_builds_the_builtin_envs(
    env_id: str, needs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from agenthub import make
    from agenthub.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    examples = re.findall(r"env_kwargs\.\S+=\S+", capsys.readouterr().out)
    assert examples, "the help shows how to give the env an argument"
    config = load_config([], [f"env={env_id}", *examples, *needs])
    asyncio.run(make(config.env, **config.env_kwargs).aclose())


# -- admission ---------------------------------------------------------------------------


def test_admission_holds_rollouts_within_max_staleness_versions() -> None:
    async def scenario() -> None:
        gate = Admission(batch_groups=2, max_staleness=1)
        for _ in range(4):  # (version 0 + staleness 1 + 1) * 2 groups may start
            assert await gate.acquire() == 0
        fifth = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0.01)
        assert not fifth.done()
        await gate.set_version(1)
        assert await asyncio.wait_for(fifth, 1) == 1
        await gate.acquire()
        sixth = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0.01)
        assert not sixth.done()
        await gate.discard(1)  # a filtered group gives its place back
        assert await asyncio.wait_for(sixth, 1) == 1
        assert gate.stats() == {"started": 7, "discarded": 1, "version": 1}

    asyncio.run(scenario())


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_only_a_rank_that_gathers_weights_imports_the_weight_sync(
    zero_stage: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A learner rank other than 0 takes part in a weight sync only by gathering under ZeRO-3;
    under ZeRO-2 it does not import the weight sync, and with it vLLM (seconds of CPU in every
    such rank of a run)."""
    monkeypatch.setitem(sys.modules, "agenthub.trainer._weight_sync", None)  # import fails
    rank = object.__new__(LearnerWorker)
    rank.rank = 1
    rank.learner = SimpleNamespace(config=SimpleNamespace(zero_stage=zero_stage), policy=None)
    if zero_stage == 3:
        with pytest.raises(ImportError):
            rank.send_weights(1)
    else:
        assert rank.send_weights(1) >= 0.0


def test_synchronous_admission_starts_exactly_one_batch_per_version() -> None:
    async def scenario() -> None:
        gate = Admission(batch_groups=3, max_staleness=0, version=5)
        for _ in range(3):
            await gate.acquire()
        blocked = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0.01)
        assert not blocked.done()
        await gate.set_version(6)
        await asyncio.wait_for(blocked, 1)

    asyncio.run(scenario())


# -- task stream -------------------------------------------------------------------------


class _Tasks(Env[str]):
    def __init__(self, n: int | None) -> None:
        self.n = n

    def tasks(self, split: str = "train") -> Any:
        count = itertools.count() if self.n is None else range(self.n)
        return (Task(id=f"{split}-{i}", prompt="p") for i in count)

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "", {}

    async def step(self, action: str) -> Step[str]:
        return Step(observation="", reward=0.0, terminated=True)


def test_finite_tasks_repeat_in_a_new_order_each_epoch() -> None:
    ids = [t.id for t in itertools.islice(task_stream(_Tasks(5), "train", 0, 0, 1), 15)]
    epochs = [ids[0:5], ids[5:10], ids[10:15]]
    assert all(sorted(e) == [f"train-{i}" for i in range(5)] for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1
    again = [t.id for t in itertools.islice(task_stream(_Tasks(5), "train", 0, 0, 1), 15)]
    assert again == ids  # seeded


def test_workers_take_disjoint_tasks() -> None:
    a = {t.id for t in itertools.islice(task_stream(_Tasks(10), "train", 1, 0, 2), 5)}
    b = {t.id for t in itertools.islice(task_stream(_Tasks(10), "train", 1, 1, 2), 5)}
    assert not a & b and len(a | b) == 10


def test_endless_sources_are_read_as_they_come() -> None:
    stream = task_stream(_Tasks(None), "train", 0, 0, 1)
    assert next(stream).id == "train-0"


def test_a_task_that_is_no_task_is_named_before_a_worker_plays_it() -> None:
    from tests.unit._envs import DictTasksEnv

    with pytest.raises(AgentHubError, match=r"env.tasks\(\) yielded dict, not agenthub.Task"):
        next(task_stream(DictTasksEnv(), "train", 0, 0, 1))


def test_a_worker_without_tasks_is_an_error() -> None:
    with pytest.raises(ValueError, match="no 'train' tasks for rollout worker 2 of 3"):
        next(task_stream(_Tasks(2), "train", 0, 2, 3))


@pytest.mark.parametrize(
    ("split", "reader"), [("dataset", "training"), ("eval_dataset", "held-out evaluation")]
)
def test_a_bad_line_deep_in_a_task_file_stops_a_run_before_ray_starts(
    tmp_path: Path, split: str, reader: str
) -> None:
    # One task of each split was read up front: held-out evaluation met line 8 mid-run.
    lines = [f'{{"prompt": "{n}+1?", "label": "{n + 1}"}}' for n in range(9)]
    (tmp_path / "good.jsonl").write_text("\n".join(lines) + "\n")
    lines[7] = "{not json"
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    files = {"dataset": "good.jsonl", "eval_dataset": "good.jsonl", split: "bad.jsonl"}
    overrides = [f"env_kwargs.{key}={tmp_path / name}" for key, name in files.items()]
    config = load_config([], ["env=math", "eval.every=10", *overrides])
    with pytest.raises(AgentHubError, match=rf"^{reader}.* reads .*bad\.jsonl:8 is not valid JSON"):
        asyncio.run(check_env(config))


def test_an_env_whose_tasks_raise_is_named_in_a_line_before_ray_starts() -> None:
    # A KeyError from the env's own `tasks` came out as a raw traceback.
    config = load_config([], ["env=tests.unit._repl_envs:TrainOnlyEnv", "eval.every=5"])
    with pytest.raises(AgentHubError) as caught:
        asyncio.run(check_env(config))
    message = str(caught.value)
    assert message.startswith(
        "held-out evaluation (eval.every=5) reads split 'held_out': the env's "
        "tasks('held_out') raised KeyError: 'held_out' (raised at "
    )
    assert "_repl_envs.py:" in message and message.endswith("; or set eval.every=0")


def test_held_out_tasks_are_read_up_front_only_as_far_as_evaluation_reads(
    tmp_path: Path,
) -> None:
    # The first 10,000 held-out tasks were read: a bad line that evaluation (eval.tasks of
    # them) never reaches stopped the run before it started.
    lines = [f'{{"prompt": "{n}+1?", "label": "{n + 1}"}}' for n in range(9)]
    (tmp_path / "good.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "bad.jsonl").write_text("\n".join([*lines[:7], "{not json"]) + "\n")
    files = [f"env_kwargs.dataset={tmp_path / 'good.jsonl'}"]
    files.append(f"env_kwargs.eval_dataset={tmp_path / 'bad.jsonl'}")
    asyncio.run(check_env(load_config([], ["env=math", "eval.tasks=7", *files])))
    with pytest.raises(AgentHubError, match=r"bad\.jsonl:8 is not valid JSON"):
        asyncio.run(check_env(load_config([], ["env=math", "eval.tasks=8", *files])))


def test_what_an_env_prints_while_checked_up_front_goes_to_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # stdout is the run's JSON summary: a "loading dataset..." line printed before it broke
    # every script reading that summary.
    register("test-printing-env", f"{__name__}:_PrintingEnv", override=True)
    asyncio.run(check_env(load_config([], ["env=test-printing-env"])))
    print("the summary")
    said = capfd.readouterr()
    assert said.out == "the summary\n", said
    assert "loading tasks" in said.err and "fetching data" in said.err


class _PrintingEnv(Env[str]):
    def __init__(self) -> None:
        print("loading tasks")
        subprocess.run(["echo", "fetching data"], check=True)  # as a download tool might

    def tasks(self, split: str = "train") -> list[Task]:
        return [Task(id=f"{split}-0", prompt="Say hi.")]

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "", {}

    async def step(self, action: str) -> Step[str]:
        return Step("", 1.0, terminated=True)


@pytest.mark.parametrize(
    ("rewards", "first", "last"),
    [
        ([0.25, 0.5, float("nan")], 0.25, None),  # the last said 0.5, from step 5
        ([float("nan"), 0.5, 0.75], None, 0.75),  # the first said 0.5, a later step's
        ([0.25, float("nan"), 0.75], 0.25, 0.75),
    ],
)
def test_the_summary_gives_no_held_out_reward_for_an_evaluation_whose_episodes_all_failed(
    tmp_path: Path, rewards: list[float], first: float | None, last: float | None
) -> None:
    config = load_config([], ["env=math"])
    cluster = FakeCluster(config, eval_rewards=rewards)
    metrics = MetricsLog(tmp_path, title="t", wandb="disabled", config={}, resume=False)
    held_out = HeldOutRewards()
    evaluator = HeldOutEvaluator(config.eval, cluster, metrics, held_out, lambda _: None)

    async def evaluate_three_times() -> None:
        for step in (0, 5, 10):
            await evaluator.evaluate(step)

    asyncio.run(evaluate_three_times())
    assert (held_out.first, held_out.last) == (first, last)
    logged = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "eval/errors" in r]
    assert [r["step"] for r in logged] == [0, 5, 10]


# -- triage ------------------------------------------------------------------------------


def test_triage_keeps_fresh_informative_groups_only() -> None:
    algo = AlgorithmConfig(max_staleness=1)
    fresh = [_trajectory(1.0, 4), _trajectory(0.0, 4)]
    assert triage(fresh, 5, algo) == "keep"
    assert triage(fresh, 6, algo) == "stale"  # the oldest token decides
    assert triage([_trajectory(1.0, 5), _trajectory(0.0, 5, error=True)], 5, algo) == "failed"
    assert triage([_trajectory(1.0, 5), _trajectory(1.0, 5)], 5, algo) == "filtered"
    unfiltered = AlgorithmConfig(filter_groups=False)
    assert triage([_trajectory(1.0, 5), _trajectory(1.0, 5)], 5, unfiltered) == "keep"
    narrow = AlgorithmConfig(filter_low=0.0, filter_high=0.4)
    assert triage([_trajectory(1.0, 5), _trajectory(0.0, 5)], 5, narrow) == "filtered"
    # Scores are the env's own: -1 for wrong, 1 for right used to fall outside a default [0, 1]
    # range of mean scores, so every group with fewer right than wrong was dropped.
    mostly_wrong = [_trajectory(-1.0, 5), _trajectory(-1.0, 5), _trajectory(1.0, 5)]
    assert triage(mostly_wrong, 5, algo) == "keep"


def test_only_failed_groups_in_a_row_count_towards_stopping_the_run(tmp_path: Path) -> None:
    failed = [_trajectory(1.0, 0), _trajectory(0.0, 0, error=True)]
    fine = [_trajectory(1.0, 0), _trajectory(0.0, 0)]
    count = FailedGroups()
    for group in (failed, failed, fine, failed, failed, failed):
        count.add(group)
    assert count.in_a_row == 3 and count.causes == {"env_error": 3}
    message = str(count.error(load_config([], ["env=math"]), tmp_path / "run", 7))
    assert "the last 3 groups of episodes all ended in errors (env_error x3)" in message
    assert "the last one: env_error: boom" in message
    assert f"agenthub train --out {tmp_path / 'run'} --resume" in message
    assert "checkpointed at step 7" in message and "run.max_failed_groups=32" in message


def _flat(version: int) -> list[list[Any]]:
    """Groups whose rewards are all equal: dynamic filtering drops every one."""
    return [[_trajectory(1.0, 0), _trajectory(1.0, 0)]]


class _Clock:
    """A clock that moves `tick` seconds each time it is read."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def _assembler(
    config: Any, out: Path, said: list[str], clock: _Clock | None = None
) -> tuple[BatchAssembler, RunControl, FakeCluster]:
    cluster, control = FakeCluster(config, groups=_flat), RunControl()
    assembler = BatchAssembler(
        config, cluster, control, out=out, log=said.append, clock=clock or _Clock(0.0)
    )
    return assembler, control, cluster


def test_the_time_limit_stops_a_batch_that_fills_slowly(tmp_path: Path) -> None:
    config = load_config([], ["env=math", "run.max_minutes=0.01"])
    assembler, control, cluster = _assembler(config, tmp_path, [], _Clock(1.0))
    assert asyncio.run(assembler.assemble(0, deadline=10.0)) is None
    assert control.reason is not None and control.reason.kind == "max_minutes"
    assert str(control.reason) == "reached max_minutes=0.01"
    assert not control.stopping, "a limit reached still evaluates the last policy"
    # each take reads the clock three times: the groups of three takes, then the deadline
    assert cluster.given_back == 3


def test_groups_that_never_carry_signal_are_reported_rather_than_waited_on(
    tmp_path: Path,
) -> None:
    # A model that gets every task wrong gives groups of equal scores only: no step ever came,
    # and nothing said why.
    said: list[str] = []
    config = load_config([], ["env=math", "algorithm.batch_groups=2", "run.max_minutes=1"])
    assembler, _, _ = _assembler(config, tmp_path, said, _Clock(0.01))
    assert asyncio.run(assembler.assemble(0, deadline=1.5)) is None
    assert said[0].startswith("the last 8 groups gave nothing to train on")  # 4 batches
    assert "scores: all 1 in 8" in said[0] and "algorithm.filter_groups=false" in said[0]


@pytest.mark.parametrize(("limit", "stops_after"), [("run.max_skipped_groups=6", 6), ("", 64)])
def test_a_run_whose_groups_never_carry_signal_stops_rather_than_spin(
    tmp_path: Path, limit: str, stops_after: int
) -> None:
    # No step, no change of policy: the same groups for ever. `run.max_steps=2` used to spin
    # until killed. By default the run stops after 32 batches' worth of groups.
    said: list[str] = []
    overrides = ["env=math", "algorithm.batch_groups=2", *filter(None, [limit])]
    assembler, control, cluster = _assembler(load_config([], overrides), tmp_path / "run", said)
    assert asyncio.run(assembler.assemble(0, deadline=math.inf)) is None
    assert control.reason is not None and control.reason.kind == "no_signal"
    assert str(control.reason) == f"the last {stops_after} groups carried no signal"
    assert control.stopping and cluster.given_back == stops_after
    message = str(control.failure)
    assert message.startswith(f"the last {stops_after} groups gave nothing to train on")
    assert "Without a step the policy cannot change" in message
    assert f"agenthub train --out {tmp_path / 'run'} --resume" in message
    assert f"run.max_skipped_groups={stops_after} sets" in message
    assert all(f"the last {stops_after} groups" not in line for line in said), "said once"


def test_failed_groups_in_a_row_stop_the_run_and_count_their_errors(tmp_path: Path) -> None:
    config = load_config([], ["env=math", "run.max_failed_groups=3"])
    cluster, control = (
        FakeCluster(config, groups=lambda v: [[_trajectory(1.0, v, True)]]),
        RunControl(),
    )
    assembler = BatchAssembler(config, cluster, control, out=tmp_path, log=print)
    assert asyncio.run(assembler.assemble(0, deadline=math.inf)) is None
    assert control.reason is not None and control.reason.kind == "failed_groups"
    assert "the last 3 groups of episodes all ended in errors" in str(control.failure)


def test_a_batch_keeps_fresh_groups_and_counts_what_it_dropped(tmp_path: Path) -> None:
    config = load_config([], ["env=math", "algorithm.batch_groups=2", "algorithm.max_staleness=1"])
    arriving = [
        [[_trajectory(1.0, 0), _trajectory(0.0, 0)]],  # stale at version 3
        [[_trajectory(1.0, 3), _trajectory(0.0, 3, error=True)]],  # failed
        [[_trajectory(1.0, 3), _trajectory(1.0, 3)]],  # filtered: no signal
        [],  # a wait: nothing came
        [[_trajectory(1.0, 2), _trajectory(0.0, 2)], [_trajectory(0.5, 3), _trajectory(0.0, 3)]],
    ]
    cluster = FakeCluster(config, groups=lambda v: arriving.pop(0))
    assembler = BatchAssembler(config, cluster, RunControl(), out=tmp_path, log=print)
    batch = asyncio.run(assembler.assemble(3, deadline=math.inf))
    assert batch is not None and len(batch.groups) == 2
    assert (batch.stale, batch.failed, batch.filtered) == (1, 1, 1)
    assert batch.errors == {"env_error": 1} and len(batch.seen) == 3
    assert cluster.given_back == 3, "each dropped group's place goes back"


def test_a_held_out_evaluation_names_its_failed_episodes_and_gives_no_reward_without_any() -> None:
    # All ten failing used to read "held-out reward nan at step 0 (10 episodes, ...)".
    failed = held_out_summary(
        reward=0.0,
        errors={"env_error": 9, "env_timeout": 1},
        last_error="env_error: ValueError: Step.reward must be finite, got nan",
    )
    assert held_out_reward(failed) is None
    assert evaluated_line(failed, 0) == (
        "held-out evaluation at step 0: 10 of 10 episodes ended in errors (env_error x9, "
        "env_timeout x1; the last: env_error: ValueError: Step.reward must be finite, got nan)"
    )
    some = held_out_summary(
        reward=0.25, errors={"env_timeout": 1}, last_error="env_timeout: slow", versions=(2, 3)
    )
    assert held_out_reward(some) == 0.25
    assert evaluated_line(some, 3) == (
        "held-out reward 0.250 at step 3 (10 episodes, policy versions 2-3); 1 of 10 episodes "
        "ended in errors (env_timeout x1; the last: env_timeout: slow)"
    )
    fine = held_out_summary(reward=0.5, versions=(5, 5))
    assert (
        evaluated_line(fine, 5) == "held-out reward 0.500 at step 5 (10 episodes, policy version 5)"
    )


def test_the_no_signal_notice_comes_ever_more_rarely_and_a_kept_group_resets_it() -> None:
    count = NoSignal(AlgorithmConfig(batch_groups=2))
    flat, wrong = [_trajectory(0.0, 0)] * 2, [_trajectory(-1.0, 0)] * 2
    said = [count.add(flat if i % 4 else wrong, "filtered") for i in range(16)]
    assert [i for i, notice in enumerate(said) if notice] == [7, 15]  # after 8, then 16
    assert "(scores: all 0 in 12, all -1 in 4)" in str(said[15])
    assert count.add(flat, "stale") is None and count.in_a_row == 16, "stale groups say nothing"
    count.add([_trajectory(1.0, 0), _trajectory(0.0, 0)], "keep")
    assert count.in_a_row == 0 and count.notice_at == 8 and not count.kinds


@pytest.mark.timeout(60)
def test_a_ray_address_nobody_answers_at_fails_at_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as unused:  # a port nothing listens on once it is closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    config = load_config([], ["env=math", f"ray.address=127.0.0.1:{port}"])
    with pytest.raises(AgentHubError, match=f"no Ray cluster answers at 127.0.0.1:{port}") as e:
        start_ray(config)  # Ray itself would retry it for minutes
    assert "`ray start --head`" in str(e.value) and "leave out --ray-address" in str(e.value)


def test_batches_carry_advantages_or_for_gae_the_rewards_the_critic_needs(tmp_path: Path) -> None:
    groups = [[_trajectory(1.0, 0), _trajectory(0.0, 0)]]
    grpo = Batch(groups=groups).collate(load_config([], ["env=math"]).algorithm)
    assert grpo.rewards is None and grpo.advantages.tolist() == pytest.approx(
        [0.7071, -0.7071], abs=1e-3
    )
    ppo = load_config([], ["env=math", "algorithm.estimator=gae"])
    critic = Batch(groups=groups).collate(ppo.algorithm)
    assert critic.rewards is not None and critic.rewards.tolist() == [1.0, 0.0]
    assert critic.advantages.tolist() == [0.0, 0.0], "the learner's critic computes them"


# -- run directory and metrics -----------------------------------------------------------


def test_run_directory_keeps_the_newest_checkpoints(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path)
    for step in (10, 20, 30):
        (run.checkpoints / f"step-{step}").mkdir(parents=True)
        run.write_state(CheckpointState(step=step, tag=f"step-{step}", tasks_drawn=[step]), keep=2)
    state = run.state()
    assert state is not None
    assert state.tag == "step-30" and state.history == ["step-20", "step-30"]
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["state.json", "step-20", "step-30"]


def test_reward_plot_is_drawn_from_metrics(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "train/reward": s / 10}) for s in range(1, 11)]
    lines += [
        json.dumps({"step": 0, "eval/reward": 0.1}),
        json.dumps({"step": 10, "eval/reward": 0.5}),
    ]
    path.write_text("\n".join(lines) + '\n{"step": 11, "train/rew')  # cut off by a crash
    records = read_metrics(path)
    assert len(records) == 12
    plot_rewards(records, tmp_path / "reward.png", "test")
    assert (tmp_path / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_reward_plot_is_drawn_off_the_caller_s_thread_and_close_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import agenthub.trainer._metrics as metrics_module

    drawn: list[tuple[str, int]] = []
    release = threading.Event()

    def slow_plot(records: list[dict[str, Any]], out: Path, title: str) -> None:
        release.wait(10)
        drawn.append((threading.current_thread().name, len(records)))

    monkeypatch.setattr(metrics_module, "plot_rewards", slow_plot)
    log = MetricsLog(tmp_path, title="t", wandb="disabled", config={}, resume=False)
    log.log({"step": 1, "train/reward": 0.5})
    log.plot()  # returns while the draw waits: the driver's loop is not held up
    log.log({"step": 2, "train/reward": 0.6})
    log.plot()
    assert drawn == []
    release.set()
    log.close()  # waits for both draws, made in order on the plotting thread
    assert [n for _, n in drawn] == [2, 2] or [n for _, n in drawn] == [1, 2]
    assert all(name.startswith("agenthub-plot") for name, _ in drawn)


def test_a_reward_plot_that_fails_is_raised_by_the_next_plot_or_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agenthub.trainer._metrics as metrics_module

    def full_disk(records: list[dict[str, Any]], out: Path, title: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metrics_module, "plot_rewards", full_disk)
    log = MetricsLog(tmp_path, title="t", wandb="disabled", config={}, resume=False)
    log.plot()
    with pytest.raises(OSError, match="No space left"):
        log.close()


def test_a_metrics_line_that_is_not_a_record_says_which(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(AgentHubError, match="holds a line that is not a metrics record .'not js"):
        read_metrics(path)
    assert read_metrics(tmp_path / "none.jsonl") == []


def test_learning_rate_defaults_to_the_models_size_class_unless_given() -> None:
    assert load_config([], ["env=math"]).learner.lr == 2e-4
    assert load_config([], ["env=math", "model=/models/qwen"]).learner.lr == 1e-6
    given = load_config([], ["env=math", "model=/models/qwen", "learner.lr=2e-6"])
    assert given.learner.lr == 2e-6
    resolved = json.loads(load_config([], ["env=math"]).model_dump_json())
    assert load_config([], ["model=/m"], base=resolved).learner.lr == 2e-4, "resume keeps it"


def test_gae_brings_a_critic_whose_settings_can_be_given() -> None:
    assert load_config([], ["env=math"]).learner.critic is None
    ppo = load_config([], ["env=math", "algorithm.estimator=gae"])
    assert ppo.learner.critic is not None and ppo.learner.critic.lam == 0.95
    assert ppo.learner.lr == 2e-4, "the policy's default learning rate still applies"
    tuned = load_config(
        [], ["env=math", "algorithm.estimator=gae", "learner.critic.lam=0.9", "learner.lr=1e-5"]
    )
    assert tuned.learner.critic is not None and tuned.learner.critic.lam == 0.9
    assert tuned.learner.lr == 1e-5
    resolved = json.loads(ppo.model_dump_json())
    assert load_config([], [], base=resolved) == ppo, "a resumed run keeps its critic"


def test_resuming_forgets_what_was_logged_after_the_checkpoint(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path)
    lines = [{"step": s, "train/reward": 0.1} for s in range(1, 6)] + [
        {"step": 4, "eval/reward": 1}
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    samples = tmp_path / "trajectories.jsonl"
    samples.write_text('{"step 1 sample": 1}\n')
    at_checkpoint = run.samples_size()
    samples.write_text(samples.read_text() + '{"step 4 sample": 1}\n{"cut off by the kil')
    run.rewind_logs(
        CheckpointState(step=3, tag="step-3", tasks_drawn=[], samples_bytes=at_checkpoint)
    )
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    assert samples.read_text() == '{"step 1 sample": 1}\n', "samples after it are gone"

    run.rewind_logs(
        CheckpointState(step=3, tag="step-3", tasks_drawn=[])
    )  # a checkpoint from before samples_bytes was recorded
    assert samples.read_text() == '{"step 1 sample": 1}\n'


def test_a_run_directory_in_use_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from agenthub.cli import main

    run = _checkpointed_run(tmp_path / "run")
    before = _files(run)
    with run.locked():  # a run training there
        assert main(["train", "--out", str(run.path), "--resume", "--steps", "5"]) == 1
    assert f"{run.path} is in use by another agenthub train run" in capsys.readouterr().err
    assert _files(run) == before and not ray.is_initialized()
    with run.locked():
        pass  # and free again once the first run ends


def test_a_run_directory_that_cannot_be_made_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    unmakeable = RunDirectory(tmp_path / "file" / "run")
    with (
        pytest.raises(AgentHubError, match="cannot create the run directory .*; choose another"),
        unmakeable.locked(),
    ):
        pass
    with RunDirectory(tmp_path / "new").locked():
        pass
    assert not (tmp_path / "new").exists(), "a run that wrote nothing leaves no directory"


@pytest.mark.timeout(30)
def test_ctrl_c_while_the_engines_start_does_not_wait_for_them(tmp_path: Path) -> None:
    control = RunControl()

    async def main() -> tuple[bool, bool, bool]:
        ready = await control.unless_stopped(asyncio.sleep(0))
        start_up = asyncio.ensure_future(asyncio.sleep(60))  # vLLM starting, say
        interrupt = StopReason.interrupted(signal.SIGINT)
        asyncio.get_running_loop().call_soon(control.stop, interrupt)
        stopped = await control.unless_stopped(start_up)
        await asyncio.sleep(0)
        return ready, stopped, start_up.cancelled()

    assert asyncio.run(main()) == (True, False, True)


def test_a_full_disk_is_named_when_a_run_fails(tmp_path: Path) -> None:
    assert disk_full(tmp_path) is None
    said = disk_full(tmp_path, below=1 << 62)
    assert said is not None and said.startswith(f"the disk holding {tmp_path} is full (")
    assert said.endswith(
        f"free space there and resume with agenthub train --out {tmp_path} --resume"
    )


@pytest.fixture
def hangup_default() -> Iterator[None]:
    """SIGHUP as a terminal session has it: a suite started under nohup inherits it ignored,
    and `interruptible` rightly leaves an ignored SIGHUP ignored."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, previous)


def _interrupt(sig: str, twice: bool, wait_s: float = 10) -> tuple[int, RunControl]:
    import os

    def log(message: str) -> None:
        raise OSError(5, "Input/output error")  # the terminal is gone

    async def main(control: RunControl) -> int:
        with interruptible(asyncio.get_running_loop(), control, log) as handler:
            os.kill(os.getpid(), getattr(signal, sig))
            await asyncio.wait_for(control.wait(), wait_s)
            if twice:  # sent again (a supervisor, a hang-up): the run still saves
                os.kill(os.getpid(), getattr(signal, sig))
                await asyncio.sleep(0.1)
        return handler.presses

    control = RunControl()
    return asyncio.run(main(control)), control


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.usefixtures("hangup_default")
def test_a_closed_terminal_stops_the_run_with_a_checkpoint_as_ctrl_c_does(sig: str) -> None:
    presses, control = _interrupt(sig, twice=sig != "SIGINT")
    assert presses == 1
    assert control.reason == StopReason("interrupted", f"interrupted by {sig}")


@pytest.mark.timeout(30)
def test_a_run_under_nohup_leaves_a_hang_up_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with pytest.raises(TimeoutError):  # the hang-up changed nothing: no stop was asked
            _interrupt("SIGHUP", twice=False, wait_s=0.5)
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_the_start(tmp_path: Path) -> None:
    # Killed (or Ctrl-C twice) before checkpoint 1: a new run there is refused, so --resume
    # must start it again rather than send the user back to the command that refused.
    config = load_config([], ["env=math"])
    for name in ("metrics.jsonl", "trajectories.jsonl", "reward.png", "wandb_run_id"):
        (tmp_path / name).write_text('{"step": 0, "eval/reward": 0.1}\n')
    with pytest.raises(AgentHubError, match="already holds a training run; pass --resume"):
        _prepare(config, tmp_path)
    said: list[str] = []
    resumed = _prepare(config, tmp_path, resume=True, log=said.append)
    assert resumed is None, "no checkpoint state: from step 0"
    assert "no checkpoint yet" in said[0] and "starting it again from step 0" in said[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"], "its old logs are gone"
    assert RunDirectory(tmp_path).saved_config() == json.loads(config.model_dump_json())


def _prepare(
    config: Any, path: Path, *, resume: bool = False, log: Any = None
) -> CheckpointState | None:
    return RunDirectory(path).prepare(config, resume=resume, log=log or (lambda _: None))


def _state_at_step_2(tag: str) -> CheckpointState:
    return CheckpointState(step=2, tag=tag, tasks_drawn=[8], elapsed_s=30.0)


def _checkpointed_run(path: Path, *overrides: str) -> RunDirectory:
    """A run directory as a run leaves it at its checkpoint of step 2."""
    run = RunDirectory(path)
    run.write_config(load_config([], ["env=math", *overrides]))
    for tag in ("step-1", "step-2"):
        (run.checkpoints / tag).mkdir(parents=True)
        run.write_state(_state_at_step_2(tag), keep=2)
    (run.path / "metrics.jsonl").write_text('{"step": 2, "train/reward": 0.5}\n')
    return run


def test_a_resumed_run_s_summary_keeps_the_held_out_reward_its_run_started_with(
    tmp_path: Path,
) -> None:
    # A resumed run does not evaluate before it trains on, so its summary gave its first
    # periodic evaluation (step 5, say) as the reward the run started with.
    run = _checkpointed_run(tmp_path)
    records = [
        {"step": 0, "eval/reward": 0.25, "eval/errors": 0},
        {"step": 1, "train/reward": 0.5},
        {"step": 2, "eval/errors": 4},  # every episode failed: no reward
        {"step": 3, "eval/reward": 0.75, "eval/errors": 0},  # after the checkpoint: rewound
    ]
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _prepare(load_config([], ["env=math"]), tmp_path, resume=True) is not None
    held_out = HeldOutRewards()
    held_out.replay(read_metrics(run.metrics))
    assert (held_out.first, held_out.last) == (0.25, None)


def test_a_resume_writes_model_again_when_it_holds_a_step_no_checkpoint_kept(
    tmp_path: Path,
) -> None:
    # Killed between writing model/ and the checkpoint's state.json, the run left model/ a
    # step ahead of every checkpoint, and the resumed run trains that step again.
    run = _checkpointed_run(tmp_path)
    (run.path / "model").mkdir()
    (run.path / "model" / MODEL_CHECKPOINT).write_text('{"step": 3, "tag": "step-3"}')
    said: list[str] = []
    config = load_config([], ["env=math"])
    cluster = FakeCluster(config)
    checkpointer = Checkpointer(config, run, cluster, said.append)
    state = run.state()
    assert state is not None
    asyncio.run(checkpointer.export_again(state))
    assert cluster.saved_models == [(tmp_path / "model", {"step": 2, "tag": "step-2"})]
    assert said == ["model/ held the policy of step 3; written again from step-2"]
    assert run.exported_step() == 2
    asyncio.run(checkpointer.export_again(state))
    assert len(cluster.saved_models) == 1, "model/ holding the checkpoint's step is kept"


def _files(run: RunDirectory) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}


def test_a_checkpoint_from_before_learner_ranks_resumes_on_one_rank(tmp_path: Path) -> None:
    from agenthub.trainer._rundir import check_resumable

    run = _checkpointed_run(tmp_path / "run")
    saved = json.loads((run.path / "config.json").read_text())
    del saved["ray"]["learner_ranks"]  # written before the setting existed
    state = run.state()
    assert state is not None
    check_resumable(run.path, saved, state, load_config([], ["env=math"]))
    two = load_config([], ["env=math", "ray.learner_ranks=2"])
    with pytest.raises(AgentHubError, match="ray.learner_ranks=1"):
        check_resumable(run.path, saved, state, two)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (["learner.bf16=true"], "written with learner.bf16=null"),
        (["learner.zero_stage=3", "--model", "/m"], 'model="default", learner.zero_stage=2'),
        (["ray.rollout_workers=2"], "ray.rollout_workers=1"),
        (["ray.learner_ranks=2"], "ray.learner_ranks=1"),
        (["algorithm.estimator=gae"], 'algorithm.estimator="group_norm"'),
    ],
)
def test_a_resume_that_changes_what_its_checkpoint_needs_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str], said: str
) -> None:
    import ray

    from agenthub.cli import main

    run = _checkpointed_run(tmp_path / "run")
    before = _files(run)
    assert main(["train", "--out", str(run.path), "--resume", "--steps", "5", *change]) == 1
    err = capsys.readouterr().err
    assert f"--resume: the checkpoints in {run.path} were written with" in err and said in err
    assert "resume with the same (drop the change)" in err
    assert _files(run) == before and not ray.is_initialized()


def test_the_trainer_itself_refuses_a_resume_its_checkpoint_cannot_take(tmp_path: Path) -> None:
    run = _checkpointed_run(tmp_path)
    before = _files(run)
    changed = load_config([], ["env=math", "learner.zero_stage=3"])
    with pytest.raises(AgentHubError, match="written with learner.zero_stage=2"):
        _prepare(changed, tmp_path, resume=True)
    assert _files(run) == before


def test_precision_is_compared_as_the_learner_resolved_it(tmp_path: Path) -> None:
    # learner.bf16=null means "by the device": a CPU run's checkpoint resumed where the learner
    # lands on a bf16 GPU would fail in DeepSpeed's loader; null -> true there is no change.
    run = _checkpointed_run(tmp_path)
    state = CheckpointState(**{**_state_at_step_2("step-2").model_dump(), "bf16": False})
    (run.checkpoints / "state.json").write_text(state.model_dump_json())
    explicit = load_config([], ["env=math", "learner.bf16=false"])
    _prepare(explicit, tmp_path, resume=True)  # null -> false: compared once the learner says
    checkpointer = Checkpointer(explicit, run, FakeCluster(explicit), print)
    checkpointer.bf16 = False
    checkpointer.check_precision(state)

    auto = load_config([], ["env=math"])
    checkpointer = Checkpointer(auto, run, FakeCluster(auto), print)
    checkpointer.bf16 = True  # the learner landed on a bf16 GPU
    with pytest.raises(AgentHubError) as refused:
        checkpointer.check_precision(state)
    assert str(refused.value) == (
        "--resume: checkpoint step-2 was written by a learner training without bf16, and this "
        "one trains in it (chosen by its device, learner.bf16=null); resume with "
        "learner.bf16=false"
    )


def test_a_resumed_run_keeps_its_saved_config_until_its_checkpoint_loads(tmp_path: Path) -> None:
    run = _checkpointed_run(tmp_path)
    saved = run.saved_config()
    _prepare(load_config([], ["env=math", "run.max_steps=9"]), tmp_path, resume=True)
    assert run.saved_config() == saved


def test_checkpoints_that_do_not_match_their_state_are_refused(tmp_path: Path) -> None:
    run = _checkpointed_run(tmp_path)
    shutil.rmtree(run.checkpoints / "step-2")
    with pytest.raises(
        AgentHubError,
        match=r"step-2, the newest checkpoint state\.json names, is "
        r"gone \(step-1 remain\); restore it, or move checkpoints/ away",
    ):
        _prepare(load_config([], ["env=math"]), tmp_path, resume=True)
    (run.checkpoints / "step-2").mkdir()
    (run.checkpoints / "state.json").unlink()
    with pytest.raises(AgentHubError, match=r"holds checkpoints \(step-1, step-2\) but no st"):
        _prepare(load_config([], ["env=math"]), tmp_path, resume=True)
    assert (tmp_path / "metrics.jsonl").exists(), "nothing was discarded"


def test_a_first_checkpoint_cut_off_while_written_starts_the_run_again(tmp_path: Path) -> None:
    # Killed while writing checkpoint 1 (state.json is written last): as if it had none.
    config = load_config([], ["env=math"])
    _prepare(config, tmp_path)
    (tmp_path / "checkpoints" / "step-20").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text('{"step": 20, "train/reward": 0.1}\n')
    assert _prepare(config, tmp_path, resume=True) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_directory_that_is_not_a_run_is_refused_not_overwritten(tmp_path: Path) -> None:
    model_config = '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}'
    (tmp_path / "config.json").write_text(model_config)
    for resume in (False, True):
        with pytest.raises(AgentHubError, match="is not a training run's config"):
            _prepare(load_config([], ["env=math"]), tmp_path, resume=resume)
    assert (tmp_path / "config.json").read_text() == model_config
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(AgentHubError, match="is not JSON"):
        RunDirectory(tmp_path).saved_config()


def test_a_corrupt_or_foreign_state_json_says_what_to_do(tmp_path: Path) -> None:
    run = _checkpointed_run(tmp_path / "run")
    state = run.checkpoints / "state.json"
    for text, wrong in [
        ('{"step": 2, "tag": "ste', "Invalid JSON"),  # cut off
        ('{"step": "two", "tag": "step-2", "tasks_drawn": []}', "step: "),  # edited
        ("[1, 2]", "an object"),  # another program's
    ]:
        state.write_text(text)
        for read in (run.state, run.checked_state):
            with pytest.raises(AgentHubError, match="is not the state of a checkpoint") as caught:
                read()
            said = str(caught.value)
            assert wrong in said and "move checkpoints/ away to start the run again" in said
        with pytest.raises(AgentHubError, match="is not the state of a checkpoint"):
            _prepare(load_config([], ["env=math"]), run.path, resume=True)
        assert "continue it with" not in run.how_to_go_on()


def test_resuming_a_complete_run_says_so_at_once_and_leaves_it_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from agenthub.cli import main

    # No model there: a run that did start would fail on it, after touching the directory.
    model = tmp_path / "no-model"
    run = RunDirectory(tmp_path / "run")
    run.write_config(load_config([], ["env=math", "run.max_steps=2", f"model={model}"]))
    (run.checkpoints / "step-2").mkdir(parents=True)
    run.write_state(_state_at_step_2("step-2"), keep=2)
    (run.path / "metrics.jsonl").write_text('{"step": 2, "train/reward": 0.5}\n')
    before = {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}

    assert main(["train", "--out", str(run.path), "--resume"]) == 0
    said = capsys.readouterr().err
    assert len(said.splitlines()) == 1 and "complete at step 2 of max_steps=2" in said
    assert f"agenthub train --out {run.path} --resume --steps M with M above 2" in said
    assert {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()} == before
    assert not ray.is_initialized()

    # Given more steps, it goes on (here as far as the missing model).
    assert main(["train", "--out", str(run.path), "--resume", "--steps", "5"]) == 1
    assert f"--model {model}: no config.json there" in capsys.readouterr().err

    # A run stopped by its time budget (which counts the time of every session) alike.
    before = {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    assert (
        main(["train", "--out", str(run.path), "--resume", "--steps", "5", "--minutes", "0.5"]) == 0
    )
    said = capsys.readouterr().err
    assert "has used its max_minutes=0.5 (0.5 minutes trained, to step 2)" in said
    assert "--resume --minutes M with M above 0.5" in said
    assert {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()} == before
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env=nope"], "no environment 'nope'"),
        (["env=math", "env_kwargs.bogus=1"], "unexpected keyword argument 'bogus'"),
        (
            ["env=math", 'env_kwargs.dataset="gone.jsonl"'],
            "dataset=gone.jsonl: the task file does not exist",
        ),
        (
            ["env=math", 'env_kwargs.dataset="{tmp}/gsm8k.jsonl"'],
            "held-out evaluation .* reads split 'held_out': .* or set eval.every=0",
        ),
    ],
)
def test_a_wrong_env_fails_before_ray_starts_or_anything_is_written(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    import ray

    (tmp_path / "gsm8k.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    config = load_config([], [o.format(tmp=tmp_path) for o in overrides])
    said: list[str] = []
    with pytest.raises(AgentHubError, match=message):
        Trainer(config, tmp_path / "run", log=said.append).run()
    assert not (tmp_path / "run").exists() and not ray.is_initialized()
    assert said == [], "no run to --resume, so no word of one"


# -- weight sync -------------------------------------------------------------------------


def test_weight_sync_takes_nccl_only_between_whole_gpus_and_places_each_engine() -> None:
    from agenthub.trainer._config import RayConfig
    from agenthub.trainer._weight_sync import WorkersClient, transfer_backend

    assert transfer_backend(RayConfig()) == "agenthub-gloo"
    assert transfer_backend(RayConfig(learner_num_gpus=1, worker_num_gpus=2)) == "nccl"
    # NCCL cannot join two processes on one GPU, which fractional shares may be.
    assert transfer_backend(RayConfig(learner_num_gpus=0.5, worker_num_gpus=0.5)) != "nccl"
    assert transfer_backend(RayConfig(learner_num_gpus=1)) != "nccl"

    client = WorkersClient(["w0", "w1", "w2"], [1, 2, 1])  # engines of 1, 2 and 1 processes
    assert client.offsets == [1, 2, 4] and WorkersClient.world_size([1, 2, 1]) == 5
    with pytest.raises(ValueError, match="2 workers but 1 rank counts"):
        WorkersClient(["w0", "w1"], [1])


def test_gpus_the_machine_lacks_are_refused_rather_than_waited_for(tmp_path: Path) -> None:
    import ray

    config = load_config([], ["env=math", "ray.learner_num_gpus=1000"])
    try:
        with pytest.raises(AgentHubError, match=r"asks for 1000 GPUs .* this machine has \d+; "):
            start_ray(config)
    finally:
        ray.shutdown()


def test_reinforce_batches_weigh_each_sequence_by_its_model_tokens() -> None:
    # OpenRLHF whitens REINFORCE++ advantages over the batch's model tokens: a long reply
    # weighs more in the mean than a short one.
    short, long = _trajectory(1.0, 0), _trajectory(0.0, 0)
    long = long.model_copy(
        update={"tokens": [1] * 9, "loss_mask": [0] + [1] * 8, "logprobs": [0.0] * 9,
                "policy_versions": [0] * 9}
    )  # fmt: skip
    algo = load_config([], ["env=math", "algorithm.estimator=reinforce"]).algorithm
    got = Batch(groups=[[short, long]]).collate(algo).advantages.tolist()
    want = advantages([1.0, 0.0], 2, "reinforce", token_counts=[2, 8])
    assert got == pytest.approx(want.tolist(), abs=1e-6) == [2.0, -0.5]
    assert got != pytest.approx(advantages([1.0, 0.0], 2, "reinforce").tolist(), abs=1e-3)


@pytest.mark.parametrize("estimator", ["group_norm", "gae"])
def test_an_agent_programs_segments_are_learned_as_sequences_of_their_own(estimator: str) -> None:
    # A program that rewrote its history went on in a new segment, sampled after its own
    # prompt: it is learned as a sequence of its own, with the episode's advantage or reward.
    rewritten = _trajectory(1.0, 0).model_copy(
        update={"tokens": [1, 2, 3, 7, 8, 9, 4], "loss_mask": [0, 1, 1, 0, 0, 1, 1],
                "logprobs": [0.0, -1, -1, 0, 0, -2, -2], "policy_versions": [0] * 7,
                "segments": [3]}
    )  # fmt: skip
    algo = load_config([], ["env=math", f"algorithm.estimator={estimator}"]).algorithm
    got = Batch(groups=[[rewritten, _trajectory(0.0, 0)]]).collate(algo)
    assert got.input_ids.tolist() == [[1, 2, 3, 0], [7, 8, 9, 4], [1, 2, 3, 0]]
    assert got.loss_mask.tolist() == [[0, 1, 1, 0], [0, 0, 1, 1], [0, 1, 1, 0]]
    shared = got.rewards if estimator == "gae" else got.advantages
    assert shared is not None and shared[0] == shared[1] != shared[2]
