"""The math and judge packages: public names, and no heavy imports."""

import subprocess
import sys
import textwrap
import types

import agenthub.envs.judge as judge
import agenthub.envs.math as math_env

BLOCKED = ("torch", "vllm", "ray", "deepspeed", "transformers")


def test_public_names_are_exported_and_exist() -> None:
    for module in (math_env, judge):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"
        public = {
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and not isinstance(v, types.ModuleType)
        }
        assert public <= set(module.__all__) | {"annotations"}, public - set(module.__all__)


def test_envs_build_with_heavy_libraries_blocked() -> None:
    probe = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError(f"blocked heavy import: {{name}}")

        sys.meta_path.insert(0, Block())
        import agenthub
        agenthub.make("math")
        agenthub.make("judge", rm_url="http://127.0.0.1:9/get_reward")
        agenthub.make("judge", judge_url="http://127.0.0.1:9/v1", judge_model="m")
        import agenthub.envs.math._check
        print(sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
