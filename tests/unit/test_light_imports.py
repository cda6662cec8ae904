"""The core, the built-in envs and the CLI never import the heavy training stack."""

import subprocess
import sys
import textwrap

import agenthub

BLOCKED = ("torch", "vllm", "ray", "deepspeed", "transformers")

PROBE = textwrap.dedent(
    f"""
    import importlib.abc, sys, time

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ImportError(f"blocked heavy import: {{name}}")

    sys.meta_path.insert(0, Block())
    start = time.perf_counter()
    import agenthub, agenthub.testing, agenthub.wrappers, agenthub.cli, agenthub.tools
    import agenthub.envs.reward_func, agenthub.envs.openrlhf_agent
    from agenthub.cli._main import build_parser
    build_parser()
    agenthub.make("reward_func", reward_func=lambda q, p, l: [1.0])
    from agenthub.testing import check_env
    print(sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}))
    """
)


def test_core_imports_with_heavy_libraries_blocked() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_does_not_import_heavy_libraries() -> None:
    code = "import sys, contextlib\nfrom agenthub.cli import main\n"
    code += "with contextlib.suppress(SystemExit):\n    main(['--help'])\n"
    code += f"print(sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r}))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_public_names_are_exported_and_exist() -> None:
    import agenthub.envs.openrlhf_agent as openrlhf_agent
    import agenthub.envs.reward_func as reward_func
    import agenthub.testing as testing
    import agenthub.tools as tools
    import agenthub.wrappers as wrappers

    for module in (agenthub, testing, tools, wrappers, reward_func, openrlhf_agent):
        assert sorted(module.__all__) == sorted(set(module.__all__))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"
        public = {n for n in vars(module) if not n.startswith("_") and not _is_module(module, n)}
        assert public <= set(module.__all__) | {"annotations"}, public - set(module.__all__)


def _is_module(module: object, name: str) -> bool:
    import types

    return isinstance(getattr(module, name), types.ModuleType)


LOWER_LAYERS = ("agents", "trainer", "envs", "repl", "sandbox", "tools", "wrappers", "testing")


def test_nothing_below_the_command_line_imports_it() -> None:
    # Layers point one way (cli -> trainer, repl -> agents -> envs, sandbox -> core): a module
    # under these packages, or the core, that imports agenthub.cli, even inside a function,
    # ties the library to its command line.
    import ast
    from pathlib import Path

    root = Path(agenthub.__file__).parent
    modules = [*root.glob("*.py"), *(p for d in LOWER_LAYERS for p in (root / d).rglob("*.py"))]
    modules = [m for m in modules if m.name != "__main__.py"]  # `python -m agenthub` runs it
    assert len(modules) > 50
    offenders = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(n == "agenthub.cli" or n.startswith("agenthub.cli.") for n in names):
                offenders.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert not offenders, f"imports of agenthub.cli below it: {offenders}"


def test_the_run_s_small_actors_and_its_config_import_without_torch() -> None:
    # The trajectory queue's and the admission's Ray actors never train: each import of torch
    # there cost ~2 s of CPU and ~300 MB at every start of a run.
    code = "import sys\nimport agenthub.trainer._queue, agenthub.trainer._workers\n"
    code += "import agenthub.trainer._config\nfrom agenthub.trainer import TrajectoryQueue\n"
    code += "heavy = ('torch', 'vllm', 'deepspeed', 'transformers')\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
