from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # A shell starting the suite in the background (`make test &`, nohup) hands it SIGINT
    # ignored, and every process it spawns inherits that: the Ctrl-C tests would then test
    # nothing but the launcher. Give the suite, and so its children, the usual Ctrl-C.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
