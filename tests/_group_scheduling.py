"""The scheduler of `make test`'s pytest-xdist run (see tests/_machine_turn.py);
imported only where xdist runs the suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

from tests._machine_turn import GROUPS


class GroupScheduling(LoadScopeScheduling):
    """Scopes are the groups in `folder`'s groups file; a test in none is a scope of its own.
    Scopes go out in collection order (`--no-loadscope-reorder`)."""

    def __init__(self, config: Any, log: Any, folder: Path) -> None:
        super().__init__(config, log)
        self._folder = folder
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # read once the workers' collections are in
            self._groups = json.loads((self._folder / GROUPS).read_text())
        return self._groups.get(nodeid, nodeid)
