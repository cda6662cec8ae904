"""What every adapter to another hub shares: the missing-extra error and typed failures."""

from __future__ import annotations

import socket
import urllib.error

import pytest

from agenthub.envs._foreign import (
    ForeignEnvError,
    MissingExtraError,
    call_foreign,
    foreign_failure,
    import_foreign,
    needs_network,
)


def test_a_missing_package_is_one_line_naming_the_extra() -> None:
    with pytest.raises(MissingExtraError) as caught:
        import_foreign("no_such_hub_package", env="nohub", extra="no-hub")
    message = str(caught.value)
    assert message == (
        "the nohub env needs the no_such_hub_package package: pip install 'agenthub[no-hub]'"
    )
    assert isinstance(caught.value, ImportError)


@pytest.mark.parametrize(
    "exc",
    [
        socket.gaierror(-3, "Temporary failure in name resolution"),
        urllib.error.URLError("no route"),
        ConnectionRefusedError(111, "refused"),
        LookupError("Resource words not found.\n  >>> nltk.download('words')"),
    ],
)
def test_failed_network_access_is_named_as_such(exc: BaseException) -> None:
    assert needs_network(exc)
    wrapped = RuntimeError("loading failed")
    wrapped.__cause__ = exc
    assert needs_network(wrapped)
    message = str(foreign_failure("textarena", "starting Wordle-v0", wrapped))
    assert message.startswith("textarena could not reach the network while starting Wordle-v0")


def test_other_failures_name_the_package_and_what_it_did() -> None:
    assert not needs_network(KeyError("towers"))
    failure = foreign_failure("gem", "playing a move", KeyError("towers"))
    assert str(failure) == "gem raised while playing a move: KeyError: 'towers'"


@pytest.mark.anyio
async def test_call_foreign_runs_off_the_loop_and_types_what_it_raises() -> None:
    assert await call_foreign("pkg", "adding", lambda: 1 + 1) == 2

    def broken() -> None:
        raise ValueError("bad board")

    with pytest.raises(ForeignEnvError, match="pkg raised while moving: ValueError: bad board"):
        await call_foreign("pkg", "moving", broken)
