import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agenthub
from agenthub import (
    Env,
    EnvArgumentsError,
    EnvBuildError,
    EnvNotFoundError,
    EnvSpec,
    PluginLoadError,
    make,
    register,
    spec,
)
from agenthub._registry import _refresh, _registered
from agenthub.wrappers import Recorder, TurnLimit

from ._envs import CountdownEnv, SyncStepEnv
from ._plugins import declare


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    before = dict(_registered)
    yield
    _registered.clear()
    _registered.update(before)
    _refresh()  # forget entry points a test declared


def test_builtin_envs_come_from_the_entry_point_group() -> None:
    found = spec("reward_func")
    assert found.package == "agenthub"
    assert found.entry_point == "agenthub.envs.reward_func:RewardFuncEnv"


def test_register_make_and_rebuild_from_json_spec() -> None:
    register("countdown", "tests.unit._envs:CountdownEnv", delay_s=0.0)
    env = make("countdown", delay_s=0.01)
    assert isinstance(env, CountdownEnv) and env.delay_s == 0.01
    assert env.spec is not None and env.spec.kwargs == {"delay_s": 0.01}
    rebuilt = make(EnvSpec.model_validate_json(env.spec.model_dump_json()))
    assert isinstance(rebuilt, CountdownEnv) and rebuilt.delay_s == 0.01
    assert "countdown" in [s.id for s in agenthub.list_envs()]


def test_non_json_kwargs_build_but_leave_no_spec() -> None:
    register("countdown", "tests.unit._envs:CountdownEnv")
    env = make("countdown", delay_s=0.0)
    assert env.spec is not None
    env = make(
        EnvSpec(id="fn", entry_point="tests.unit._envs:factory_returning"), value=CountdownEnv()
    )
    assert isinstance(env, CountdownEnv) and env.spec is None


def test_registering_twice_needs_override() -> None:
    register("countdown", "tests.unit._envs:CountdownEnv")
    with pytest.raises(ValueError, match="already registered"):
        register("countdown", "tests.unit._envs:EndlessEnv")
    register("countdown", "tests.unit._envs:EndlessEnv", override=True)
    # A built-in (or a plugin's) id was replaced without a word.
    with pytest.raises(
        ValueError, match=r"'math' is already registered to .* \(package 'agenthub'\)"
    ):
        register("math", "tests.unit._envs:EndlessEnv")
    assert spec("countdown").entry_point.endswith("EndlessEnv")


def test_unknown_id_lists_known_envs_and_says_how_to_fix() -> None:
    with pytest.raises(EnvNotFoundError, match=r"no environment 'nope'.*reward_func.*entry point"):
        make("nope")


def test_an_unregistered_class_is_named_by_its_module() -> None:
    env = make("tests.unit._envs:CountdownEnv", delay_s=0.5)
    assert env.spec is not None and env.spec.entry_point == "tests.unit._envs:CountdownEnv"
    assert make(env.spec).spec == env.spec
    with pytest.raises(PluginLoadError, match="'no_such_module_xyz:Env = no_such_module_xyz:Env'"):
        make("no_such_module_xyz:Env")
    with pytest.raises(EnvNotFoundError, match="or name the class itself as 'package.module:Attr'"):
        make(":Env")


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("no_such_module_xyz:Env", r"failed to load: ModuleNotFoundError.*must name 'module:Attr'"),
        ("tests.unit._envs:Missing", r"failed to load: AttributeError"),
        ("tests.unit._envs:__doc__", r"not callable"),
    ],
)
def test_bad_entry_points_name_the_entry_point_and_what_to_export(
    entry_point: str, message: str
) -> None:
    register("bad", entry_point)
    with pytest.raises(PluginLoadError, match=message) as info:
        make("bad")
    assert f"'bad = {entry_point}'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "source", "error"),
    [
        (
            "plugin_syntax",
            "import json\n\n\nclass GuessEnv(:\n",
            "{file}:4: SyntaxError: invalid syntax",
        ),
        (
            "plugin_raises",
            "import json\n\nSECRET = json.loads('')\n",
            "importing plugin_raises raised JSONDecodeError: Expecting value: line 1 column 1 "
            "(char 0) (raised at {file}:3, in <module>)",
        ),
        (
            "plugin_needs",
            "import not_installed_xyz\n",
            "importing plugin_needs raised ModuleNotFoundError: No module named "
            "'not_installed_xyz' (raised at {file}:1, in <module>)",
        ),
    ],
)
def test_a_plugin_whose_module_fails_to_import_is_named_at_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str, error: str
) -> None:
    monkeypatch.syspath_prepend(tmp_path)
    module = tmp_path / f"{name}.py"
    module.write_text(source)
    declare(tmp_path, "guess", {"guess": f"{name}:GuessEnv"})
    with pytest.raises(PluginLoadError) as info:
        make("guess")
    assert str(info.value) == (
        f"environment 'guess' (package 'guess', entry point 'guess = {name}:GuessEnv') "
        f"failed to load: {error.format(file=module)}"
    )


def test_a_module_missing_from_an_installed_package_is_the_entry_point_s_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(tmp_path)
    (tmp_path / "guess_package").mkdir()
    (tmp_path / "guess_package" / "__init__.py").write_text("")
    declare(tmp_path, "guess", {"guess": "guess_package.envs:GuessEnv"})
    with pytest.raises(PluginLoadError, match=r"No module named 'guess_package\.envs'\. The entry"):
        make("guess")


def test_factory_returning_a_non_env_is_rejected() -> None:
    register("weird", "tests.unit._envs:factory_returning", value=3)
    with pytest.raises(PluginLoadError, match="returned int, not an agenthub.Env"):
        make("weird")


def test_wrong_arguments_name_the_env() -> None:
    register("countdown", "tests.unit._envs:CountdownEnv")
    with pytest.raises(EnvArgumentsError, match="environment 'countdown'.*could not be built"):
        make("countdown", colour="red")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'") as info:
        make("countdown", colour="red")  # still what the constructor raised, for old callers
    assert "raised at" not in str(info.value)
    assert str(info.value).endswith(
        "'colour'; it takes delay_s (`agenthub envs show countdown` describes them)"
    )
    with pytest.raises(EnvArgumentsError, match=r"'delay' \(did you mean 'delay_s'\?\); it takes"):
        make("countdown", delay=1.0)


def test_a_bug_inside_a_constructor_points_at_its_line() -> None:
    register("buggy", "tests.unit._envs:BuggyInit", override=True)
    with pytest.raises(EnvArgumentsError, match=r"int\(\) argument must be .*NoneType'") as info:
        make("buggy")
    assert re.search(r"\(raised at .*_envs\.py:\d+, in __init__\)$", str(info.value))


def test_an_argument_of_the_wrong_type_is_named_before_the_env_is_built() -> None:
    register("countdown", "tests.unit._envs:CountdownEnv")
    with pytest.raises(EnvArgumentsError, match=r"argument delay_s='abc' must be float: input"):
        make("countdown", delay_s="abc")  # as `agenthub eval ... delay_s=abc` passes it
    # What pydantic would take is passed on as the annotated type: `"20"` or `1e2` for an int.
    made = make("countdown", delay_s="0.5")
    assert made.delay_s == 0.5 and made.spec is not None and made.spec.kwargs["delay_s"] == "0.5"
    assert type(make("countdown", delay_s=1).delay_s) is float
    scaffolded = make("math", num_tasks=1e2, max_attempts="2")
    assert (scaffolded._num_tasks, scaffolded._max_attempts) == (100, 2)  # type: ignore[attr-defined]
    sandbox = make("code_exec", backend="unisolated").sandbox  # type: ignore[attr-defined]
    assert make("code_exec", sandbox=sandbox).spec is None  # a non-JSON type of its own
    with pytest.raises(EnvArgumentsError, match="argument sandbox='box' must be"):
        make("code_exec", sandbox="box")


@pytest.mark.parametrize("error", ["RuntimeError", "FileNotFoundError"])
def test_a_failing_constructor_is_an_error_naming_the_env_and_the_cause(error: str) -> None:
    register("needs-data", "tests.unit._envs:factory_raising", error=error)
    with pytest.raises(EnvBuildError) as info:
        make("needs-data", message="cannot find data file /data/x.json")
    assert str(info.value).startswith("environment 'needs-data' (entry point 'needs-data = ")
    assert str(info.value).endswith(f"{error}: cannot find data file /data/x.json")
    assert type(info.value.__cause__).__name__ == error


def test_an_interrupt_while_building_is_not_wrapped() -> None:
    register("slow", "tests.unit._envs:factory_raising", error="KeyboardInterrupt")
    with pytest.raises(KeyboardInterrupt):
        make("slow", message="")


@pytest.mark.parametrize(
    "wrap", [lambda env: env, lambda env: TurnLimit(Recorder(env), 3)], ids=["bare", "wrapped"]
)
def test_a_step_without_async_is_refused_when_the_env_is_made(
    wrap: Callable[[Env[Any]], Env[Any]],
) -> None:
    register("forgetful", "tests.unit._envs:factory_returning")
    with pytest.raises(
        PluginLoadError,
        match=r"environment 'forgetful'.*: SyncStepEnv.step must "
        r"be `async def step\(self, action\)`, not def",
    ):
        make("forgetful", value=wrap(SyncStepEnv()))
    assert isinstance(make("forgetful", value=wrap(CountdownEnv())), Env)


def test_an_id_two_packages_declare_fails_only_when_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(tmp_path)
    declare(tmp_path, "mine", {"clash": "mine.env:Env", "only-mine": "mine.env:Other"})
    declare(tmp_path, "theirs", {"clash": "theirs.env:Env"})
    assert spec("reward_func").package == "agenthub"
    assert spec("only-mine").package == "mine"
    assert [s.id for s in agenthub.list_envs()].count("clash") == 1
    with pytest.raises(PluginLoadError, match=r"'clash' is declared by several installed packages"):
        make("clash")
    with pytest.raises(PluginLoadError, match=r"\((mine, theirs|theirs, mine)\).*uninstall one"):
        spec("clash")


def test_an_async_tasks_method_is_refused_when_the_env_is_made() -> None:
    register("async-tasks", "tests.unit._envs:AsyncTasksEnv")
    with pytest.raises(PluginLoadError, match=r"AsyncTasksEnv.tasks must be a plain `def tasks"):
        make("async-tasks")


def test_a_class_or_function_is_registered_by_its_import_path() -> None:
    assert register("by-class", CountdownEnv).entry_point == "tests.unit._envs:CountdownEnv"
    assert isinstance(make("by-class"), CountdownEnv)
    made = make("by-class", delay_s=0.0)
    assert made.spec is not None and make(made.spec).spec == made.spec
    from tests.unit._envs import factory_returning

    assert register("by-function", factory_returning).entry_point.endswith(":factory_returning")


def test_what_cannot_be_imported_back_is_refused_at_register() -> None:
    class Local(CountdownEnv):
        pass

    with pytest.raises(ValueError, match=r"Local is defined inside a function.*top level"):
        register("local", Local)
    with pytest.raises(TypeError, match=r"not int object 3"):
        register("number", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"builtins.int is not an agenthub.Env subclass"):
        register("int", int)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"does not import back"):
        register("made", type("CountdownEnv", (CountdownEnv,), {"__module__": __name__}))
    assert "local" not in _registered


def test_a_reset_without_seed_is_refused_when_the_env_is_made() -> None:
    register("seedless", "tests.unit._envs:SeedlessResetEnv")
    with pytest.raises(PluginLoadError, match=r"SeedlessResetEnv.reset\(task: 'Task'\) cannot"):
        make("seedless")


def test_an_env_registered_from_a_script_is_not_looked_for_as_a_package() -> None:
    with pytest.raises(PluginLoadError, match=r"registered from a script.*move the env into"):
        make(EnvSpec(id="scripted", entry_point="__main__:NoSuchEnv"))
