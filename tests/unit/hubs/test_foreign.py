"""What every adapter to another hub shares: the missing-extra error and typed failures."""

from __future__ import annotations

import socket
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenthub.envs._foreign import (
    ForeignEnvError,
    MissingExtraError,
    call_foreign,
    foreign_failure,
    import_foreign,
    needs_network,
)
from agenthub.envs.verifiers._bridge import legacy
from agenthub.envs.verifiers._v1 import v1


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


@pytest.fixture
def fake_verifiers_forgotten() -> Iterator[None]:
    """The fake verifiers packages a test imports leave `sys.modules` with it: a later test
    would find them as the installed verifiers."""
    before = set(sys.modules)
    yield
    for name in [m for m in sys.modules if m == "verifiers" or m.startswith("verifiers.")]:
        if name not in before:
            del sys.modules[name]


@pytest.mark.usefixtures("fake_verifiers_forgotten")
def test_a_verifiers_without_the_classic_api_is_named_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verifiers 0.4 ships only `verifiers.v1`: the classic adapter says so, not "install it".
    (tmp_path / "verifiers").mkdir()
    (tmp_path / "verifiers" / "__init__.py").write_text("__version__ = '0.4.0'\n")
    (tmp_path / "verifiers" / "v1").mkdir()
    (tmp_path / "verifiers" / "v1" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "verifiers" or m.startswith("verifiers.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingExtraError) as caught:
        legacy()
    assert str(caught.value) == (
        "the verifiers env runs verifiers' classic API (verifiers.legacy), which the installed "
        "verifiers 0.4.0 does not have: install the version agenthub was tested with (pip "
        "install 'agenthub[verifiers]'), or run a v1 taskset with the verifiers_v1 env"
    )


def test_no_verifiers_at_all_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", None)  # not importable
    with pytest.raises(MissingExtraError) as caught:
        legacy()
    assert str(caught.value) == (
        "the verifiers env needs the verifiers package: pip install 'agenthub[verifiers]'"
    )


@pytest.mark.usefixtures("fake_verifiers_forgotten")
def test_a_verifiers_with_another_v1_is_named_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verifiers 0.2 has a `v1` of another shape: no `v1.utils.loaders`.
    (tmp_path / "verifiers" / "v1").mkdir(parents=True)
    (tmp_path / "verifiers" / "__init__.py").write_text("__version__ = '0.2.1'\n")
    (tmp_path / "verifiers" / "v1" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "verifiers" or m.startswith("verifiers.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingExtraError) as caught:
        v1("utils.loaders")
    assert str(caught.value) == (
        "the verifiers_v1 env runs verifiers' v1 tasksets as verifiers 0.3 and 0.4 define them, "
        "which the installed verifiers 0.2.1 does not (it has no verifiers.v1.utils.loaders): "
        "pip install 'agenthub[verifiers]'"
    )
