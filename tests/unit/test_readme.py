"""The README's and the manual's code runs as written, the README's links lead somewhere, and
the train config reference is generated from every field's docstring."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest
from markdown.extensions.toc import slugify
from pydantic import BaseModel, Field

from agenthub.testing import check_env

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
ENVS_PAGE = REPO / "docs" / "envs.md"
TOOLS_PAGE = REPO / "docs" / "tool-envs.md"


def example(page: Path, lead_in: str, **defined: object) -> dict[str, object]:
    """Run the page's Python block that follows `lead_in`, with `defined` (what earlier
    blocks define) already there; return what it defined."""
    text = page.read_text(encoding="utf-8")
    found = re.search(re.escape(lead_in) + r"\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"{page.name}'s example after {lead_in!r} moved"
    namespace: dict[str, object] = dict(defined)
    exec(compile(found[1], str(page.relative_to(REPO)), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("page", [README, ENVS_PAGE], ids=["README", "envs page"])
def test_the_contract_example_passes_check_env(page: Path) -> None:
    check_env(example(page, "The contract:")["GuessNumberEnv"]())  # type: ignore[operator]


def test_the_tool_example_passes_check_env() -> None:
    env = example(TOOLS_PAGE, "A complete tool env:")["Calculator"]()  # type: ignore[operator]
    check_env(env)
    assert [t["function"]["name"] for t in env.tools] == ["add"]


def test_the_task_file_example_reads_each_split_from_the_file_given_for_it(
    tmp_path: Path,
) -> None:
    guess = example(ENVS_PAGE, "The contract:")["GuessNumberEnv"]
    env_class = example(ENVS_PAGE, "mapping itself:", GuessNumberEnv=guess)
    files = {}
    for split, secret in (("train", 3), ("held_out", 7)):
        path = tmp_path / f"{split}.jsonl"
        path.write_text(json.dumps({"prompt": "Guess my number (1-10).", "label": secret}) + "\n")
        files[split] = str(path)
    env = env_class["GuessFromFilesEnv"](**files)  # type: ignore[operator]
    [held_out] = env.tasks("held_out")
    assert held_out.label == 7 and held_out.id == "held_out-1"
    check_env(env)


# --- links -------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def local_links(text: str) -> list[str]:
    """The targets of the text's Markdown links and images outside code blocks, less those
    that leave the repository (a scheme such as https:)."""
    prose = FENCE.sub("", text)
    return [t for t in LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """The ids MkDocs gives the page's headings (GitHub's agree for these headings)."""
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    headings = re.findall(r"^#{1,6} +(.+?) *$", prose, re.MULTILINE)
    return {slugify(re.sub(r"[`*]", "", heading), "-") for heading in headings}


def broken(source: Path, target: str) -> str | None:
    """What is wrong with the link from `source` to `target`, or None."""
    path, _, anchor = target.partition("#")
    page = (source.parent / path).resolve() if path else source
    if not page.is_file():
        return f"{target}: there is no such file"
    if anchor and anchor not in anchors(page):
        return f"{target}: {path or source.name} has no heading with the id {anchor!r}"
    return None


def test_every_link_of_the_readme_leads_to_a_file_and_heading_that_exist() -> None:
    targets = local_links(README.read_text(encoding="utf-8"))
    assert any(t.startswith("docs/") for t in targets), "the README should link to the manual"
    problems = [p for t in targets if (p := broken(README, t)) is not None]
    assert not problems, "the README links where nothing is: " + "; ".join(problems)


def test_a_link_to_a_missing_page_or_heading_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Title\n\n## What to expect (`x`)\n")
    source = tmp_path / "README.md"
    text = "[a](docs/page.md#what-to-expect-x) [b](docs/gone.md) [c](docs/page.md#nope)\n"
    text += "```\n[d](docs/in-a-code-block.md)\n```\n[e](https://example.org/x.md)\n"
    links = local_links(text)
    assert links == ["docs/page.md#what-to-expect-x", "docs/gone.md", "docs/page.md#nope"]
    assert [broken(source, link) for link in links] == [
        None,
        "docs/gone.md: there is no such file",
        "docs/page.md#nope: docs/page.md has no heading with the id 'nope'",
    ]


# --- the train config reference -----------------------------------------------------------------


def config_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "train_config_hook", REPO / "docs" / "hooks" / "train_config.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Inner(BaseModel):
    """How the inner part behaves."""

    depth: int = Field(3, ge=1)
    """How deep it goes."""


class _Tree(BaseModel):
    """The whole tree."""

    name: str
    """What it is called."""
    mode: str = "fast"
    """Fast | slow."""
    inner: _Inner = _Inner()
    """The inner part."""


class _Undocumented(BaseModel):
    documented: int = 1
    """This one says what it is."""
    silent: int = 2


def test_the_config_reference_has_an_entry_per_field_with_type_default_and_docstring() -> None:
    page = config_hook().render(_Tree)
    assert "`name` · string · required\n:   What it is called.\n" in page
    assert '`mode` · string · default `"fast"`\n:   Fast | slow.\n' in page
    assert "## `inner`\n\nHow the inner part behaves. The inner part." in page
    assert "`inner.depth` · int, ≥ 1 · default `3`\n:   How deep it goes.\n" in page


def test_a_config_field_without_a_docstring_fails_the_build() -> None:
    hook = config_hook()
    with pytest.raises(hook.PluginError, match=r"_Undocumented\.silent has no docstring"):
        hook.render(_Undocumented)


def test_the_config_reference_lists_every_key_of_the_train_config() -> None:
    pytest.importorskip("torch", reason="the train config comes with the train extra")
    hook = config_hook()
    train_config = hook.find_train_config(REPO)
    page = hook.render(train_config)
    for key, section, _ in hook.sections(train_config):
        for name in section.model_fields:
            if hook._section_of(section.model_fields[name].annotation) is None:
                full = f"{key}.{name}" if key else name
                assert f"\n`{full}` · " in page, f"{full} is missing from the reference"
    assert "\n`learner.critic.lam` · " in page and "\n`rollout.temperature` · " in page
