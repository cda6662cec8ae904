"""agenthub.agents is light to import and exports exactly its public names."""

import subprocess
import sys
import types

import agenthub.agents as agents

PROBE = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "vllm", "ray", "deepspeed", "transformers"}:
            raise ImportError(f"blocked heavy import: {name}")

sys.meta_path.insert(0, Block())
import agenthub.agents, agenthub.cli._eval
from agenthub.cli import main
try:
    main(["eval", "--help"])
except SystemExit:
    pass
"""


def test_agents_and_eval_import_without_heavy_libraries() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "--base-url" in result.stdout


def test_public_names_are_exported_and_exist() -> None:
    assert sorted(agents.__all__) == sorted(set(agents.__all__))
    for name in agents.__all__:
        assert hasattr(agents, name), name
    public = {
        n
        for n, v in vars(agents).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert public <= set(agents.__all__), public - set(agents.__all__)
