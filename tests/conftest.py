from __future__ import annotations

import signal
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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
