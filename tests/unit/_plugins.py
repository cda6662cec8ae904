"""Plugin packages that look installed to `importlib.metadata`, written without pip."""

from __future__ import annotations

from pathlib import Path

from agenthub import _registry


def declare(site: Path, package: str, envs: dict[str, str]) -> None:
    """Make `package` look installed in `site` (a `sys.path` entry) with these `agenthub.envs`
    entry points (id -> "module:Attr"), and have the registry read entry points again."""
    dist = site / f"{package.replace('-', '_')}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    lines = [f"[{_registry.ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in envs.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    _registry._refresh()
