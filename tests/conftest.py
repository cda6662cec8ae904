from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._machine_turn import Turns, write_groups

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # A shell starting the suite in the background (`make test &`, nohup) hands it SIGINT
    # ignored, and every process it spawns inherits that: the Ctrl-C tests would then test
    # nothing but the launcher. Give the suite, and so its children, the usual Ctrl-C.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Session fixtures that a worker builds for itself: the modules whose tests use them are one
# group (a module, as a test may ask for one by name, `request.getfixturevalue`).
ONE_WORKER_FIXTURES = ("vllm_server", "hub_venv")
TURNS = pytest.StashKey[Turns]()
TRAINER = Path(__file__).parent / "integration" / "trainer"  # the end-to-end training runs
# The training runs that keep both cores 73-84% busy on their own: side by side they took 1.6x
# as long each, so they run one after another on one worker, beside the tests that wait.
BUSY_TRAINING_RUNS = {
    TRAINER / name
    for name in (
        "test_train_cli.py",
        "test_multi_node.py",
        "test_learner_ranks.py",
        "test_chaos.py",
    )
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, in each worker: the groups for the scheduler, and the order it hands
    them out in (tests/_machine_turn.py)."""
    folder = _shared_folder(config)
    if folder is None:
        return
    sharing = {
        item.path
        for item in items
        if any(name in item.fixturenames for name in ONE_WORKER_FIXTURES)  # type: ignore[attr-defined]
    }
    groups = {}
    for item in items:
        if item.get_closest_marker("alone"):
            groups[item.nodeid] = "alone"
        elif item.path in sharing:
            groups[item.nodeid] = "vllm_serve_and_hub_venvs"
        elif item.path in BUSY_TRAINING_RUNS:
            groups[item.nodeid] = "busy_training_runs"
        elif _uses_a_module_fixture(item):
            groups[item.nodeid] = f"module {item.path}"
    items.sort(key=lambda item: _turn_order(item, groups))
    write_groups(folder, groups)


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """Whether an integration test uses a module-scoped fixture (a fresh venv, a browser, a
    Ray cluster): its module's tests then run on one worker, which builds it once, where the
    two workers would each build it for their share of the module's tests. A plugin's own
    (anyio's `anyio_backend`, defined nowhere in tests/) costs nothing and does not count."""
    if not item.get_closest_marker("integration"):
        return False
    definitions = item._fixtureinfo.name2fixturedefs.values()  # type: ignore[attr-defined]
    return any(d.scope == "module" and d.baseid for chain in definitions for d in chain)


def _turn_order(item: pytest.Item, groups: dict[str, str]) -> int:
    """Longest first, so that no long test starts last: the `alone` group, then the `vllm
    serve` group and the training runs, the unit tier last (short tests fill the end)."""
    group = groups.get(item.nodeid)
    if group == "alone":
        return 0
    if not (item.get_closest_marker("integration") or item.get_closest_marker("smoke")):
        return 4
    if group is not None:
        return 1
    return 2 if item.path.is_relative_to(TRAINER) else 3


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (what `make test` asks for): the groups the workers wrote."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests._group_scheduling import GroupScheduling

    factory: pytest.TempPathFactory = config._tmp_path_factory  # type: ignore[attr-defined]
    return GroupScheduling(config, log, factory.getbasetemp())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Set-up (module and session fixtures included), call and teardown, inside the test's turn
    # on the machine when the suite runs on pytest-xdist's workers (tests/_machine_turn.py).
    # Outermost (tryfirst), so the wait for a turn is not counted in pytest-timeout's limit.
    folder = _shared_folder(item.config)
    if folder is None:
        yield
        return
    turns = item.config.stash.setdefault(TURNS, Turns(folder))
    alone = item.get_closest_marker("alone") is not None
    with turns.of(alone=alone, next_alone=bool(nextitem and nextitem.get_closest_marker("alone"))):
        yield


def _shared_folder(config: pytest.Config) -> Path | None:
    """The temporary folder this session's xdist workers share; None without xdist."""
    if not hasattr(config, "workerinput"):
        return None
    factory: pytest.TempPathFactory = config._tmp_path_factory  # type: ignore[attr-defined]
    return factory.getbasetemp().parent


@pytest.hookimpl(trylast=True)  # after --durations
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # After the slowest tests (--durations), before pytest's own summary, which CI reads as
    # the log's last line: how long the whole `make test` has taken (set-up, lint, tests).
    started = os.environ.get("AGENTHUB_MAKE_TEST_STARTED", "")
    if started.isdigit():
        total = round(time.time() - int(started))
        terminalreporter.write_line(
            f"make test: {total} s ({total // 60} min {total % 60} s) from set-up to here; "
            "the budget is 40 min (CI stops at 90; docs/development.md)"
        )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
