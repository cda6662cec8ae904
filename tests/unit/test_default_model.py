"""The default model's builder, on a tiny configuration and test environments: tokenizer,
chat template, transformers loading, caching, atomicity and determinism."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agenthub import make
from agenthub.agents.default_model import (
    MANIFEST,
    DefaultModelConfig,
    DemonstrationError,
    build_default_model,
    collect_demonstrations,
    default_model_key,
    ensure_default_model,
)
from agenthub.cli import main
from tests.unit._demo_envs import register_demo_envs

pytest.importorskip("transformers", reason="building the default model needs the train extra")

TINY = DefaultModelConfig(
    env_ids=("test_arith", "test_echo"),
    demos_per_env=48,
    vocab_size=400,
    hidden_size=128,
    intermediate_size=256,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    max_position_embeddings=512,
    sft_steps=4,
    batch_size=8,
)


@pytest.fixture(autouse=True)
def _demo_envs() -> None:
    register_demo_envs()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    register_demo_envs()
    return build_default_model(tmp_path_factory.mktemp("tiny") / "model", TINY)


class RecordingProgress:
    def __init__(self) -> None:
        self.phases: list[str] = []
        self.losses: list[float] = []

    def phase(self, name: str, total: int | None = None) -> None:
        self.phases.append(name)

    def advance(self, loss: float | None = None) -> None:
        if loss is not None:
            self.losses.append(loss)


def test_demonstrations_interleave_envs_and_skip_tasks_without_reference() -> None:
    demos = collect_demonstrations(["test_arith", "test_echo"], 3)
    assert [d.env_id for d in demos] == ["test_arith", "test_echo"] * 3
    assert all(d.response for d in demos)
    assert [d.response for d in demos if d.env_id == "test_echo"] == ["river", "cloud", "river"]
    assert demos[0].messages[0].role == "user" and "\\boxed" in demos[0].response


def test_demonstrations_open_as_the_env_s_episodes_do_with_its_system_prompt() -> None:
    [demo] = collect_demonstrations(["test_ruled_echo"], 1)
    assert [m.role for m in demo.messages] == ["system", "user"]
    assert demo.messages[0].content == "Repeat the word, nothing else."


def test_a_share_of_demonstrations_shows_the_planted_mistake() -> None:
    tasks_of = {e: {t.id: t for t in make(e).tasks("train")} for e in ("code_exec", "math")}
    demos = collect_demonstrations(["code_exec", "math"], 400, mistake_share=0.5, seed=3)
    for env_id in ("code_exec", "math"):
        shown = [d for d in demos if d.env_id == env_id]
        mistakes = {t.metadata["mistake"] for t in tasks_of[env_id].values()}
        mistaken = [d for d in shown if d.response in mistakes]
        assert len(shown) == 400 and 160 < len(mistaken) < 240, (env_id, len(mistaken))
    for demo in demos:  # every response is the task's reference or its mistake
        meta = tasks_of[demo.env_id][demo.task_id].metadata
        assert demo.response in (meta["reference"], meta["mistake"])
    again = collect_demonstrations(["code_exec", "math"], 400, mistake_share=0.5, seed=3)
    assert again == demos
    assert collect_demonstrations(["code_exec"], 50, mistake_share=0.0) == (
        collect_demonstrations(["code_exec"], 50)
    )
    with pytest.raises(ValueError, match=r"mistake_share must be within \[0, 1\]"):
        collect_demonstrations(["code_exec"], 5, mistake_share=1.5)


def test_missing_env_or_env_without_references_is_a_clear_error() -> None:
    with pytest.raises(DemonstrationError, match=r"'code_exec_missing', which is not installed"):
        collect_demonstrations(["test_arith", "code_exec_missing"], 2)
    with pytest.raises(DemonstrationError, match=r"no 'train' tasks with metadata\['reference'\]"):
        collect_demonstrations(["test_no_reference"], 2)
    with pytest.raises(DemonstrationError, match="has no built-in 'train' tasks"):
        collect_demonstrations(["test_no_tasks"], 2)


def test_config_rejects_heads_vllm_cannot_run() -> None:
    with pytest.raises(ValueError, match="at least 64"):
        DefaultModelConfig(hidden_size=128, num_heads=4)


def test_tokenizer_round_trips_text_and_keeps_special_tokens_whole(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for text in [
        "What is 12 + 30?",
        "  two  spaces\n\nand\ttabs ",
        "ünïcödé → ∑ 😀",
        "\\boxed{42}",
    ]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert len(tokenizer.encode(special, add_special_tokens=False)) == 1
    # digits are split one by one, which arithmetic needs
    assert len(tokenizer.encode("12345", add_special_tokens=False)) == 5


def test_chat_template_renders_every_role_qwen_style(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Run it."},
        {"role": "assistant", "content": "print(1)"},
        {"role": "tool", "content": "1"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nRun it.<|im_end|>\n"
        "<|im_start|>assistant\nprint(1)<|im_end|>\n<|im_start|>tool\n1<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    plain = tokenizer.apply_chat_template(messages[:2], tokenize=False)
    assert not plain.endswith("<|im_start|>assistant\n")


def test_built_directory_loads_in_transformers_and_generates(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    names = {p.name for p in tiny_model.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert json.loads((tiny_model / "tokenizer_config.json").read_text())["chat_template"]
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["hidden_size"] // config["num_attention_heads"] >= 64

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    manifest = json.loads((tiny_model / MANIFEST).read_text())
    assert manifest["demonstrations"]["by_env"] == {"test_arith": 48, "test_echo": 48}
    assert len(manifest["config"]["env_ids"]) == 2


def test_builds_are_deterministic(tiny_model: Path, tmp_path: Path) -> None:
    again = build_default_model(tmp_path / "again", TINY)
    files = sorted(p.name for p in tiny_model.iterdir())
    assert files == sorted(p.name for p in again.iterdir())
    for name in files:
        assert (tiny_model / name).read_bytes() == (again / name).read_bytes(), name


def test_cache_builds_once_and_keys_on_config(tmp_path: Path) -> None:
    first, second = RecordingProgress(), RecordingProgress()
    path = ensure_default_model(tmp_path, TINY, progress=first)
    assert path.parent == tmp_path and path.name.startswith("default-")
    assert len(first.losses) == TINY.sft_steps and "training the tokenizer" in first.phases
    assert ensure_default_model(tmp_path, TINY, progress=second) == path
    assert "training the tokenizer" not in second.phases
    other = TINY.model_copy(update={"seed": 1})
    demos = collect_demonstrations(
        TINY.env_ids, TINY.demos_per_env, mistake_share=TINY.mistake_share, seed=TINY.seed
    )
    assert default_model_key(other, demos) != default_model_key(TINY, demos)
    assert path.name == f"default-{default_model_key(TINY, demos)}"


def test_train_shows_a_first_build_on_its_progress_bar(tmp_path: Path) -> None:
    from rich.progress import Progress, TextColumn

    from agenthub.cli._train import _BuildOnBar

    progress = Progress(TextColumn("{task.fields[stats]}"))
    bar = progress.add_task("train", stats="starting")
    shown = _BuildOnBar(progress, bar)
    seen: list[str] = []

    class Watching:  # what the bar says after each report of the build
        def phase(self, name: str, total: int | None = None) -> None:
            shown.phase(name, total)
            seen.append(progress.tasks[0].fields["stats"])

        def advance(self, loss: float | None = None) -> None:
            shown.advance(loss)
            seen.append(progress.tasks[0].fields["stats"])

    ensure_default_model(tmp_path, TINY, progress=Watching())
    assert seen[0] == "default model: training the tokenizer"
    assert seen[-1] == "default model: saving"
    sft = [line for line in seen if line.startswith("default model: warm start")]
    assert sft[-1].startswith(f"default model: warm start (supervised) 4/{TINY.sft_steps} loss ")


def test_concurrent_callers_build_once(tmp_path: Path) -> None:
    progresses = [RecordingProgress() for _ in range(3)]
    results: list[Path] = []

    def call(progress: RecordingProgress) -> None:
        results.append(ensure_default_model(tmp_path, TINY, progress=progress))

    threads = [threading.Thread(target=call, args=(p,)) for p in progresses]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 3 and len(set(results)) == 1
    assert sum("training the tokenizer" in p.phases for p in progresses) == 1
    cached = RecordingProgress()  # a model already built is not announced at all
    assert ensure_default_model(tmp_path, TINY, progress=cached) == results[0]
    assert cached.phases == []


def test_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    # Every demonstration is longer than 16 tokens: the build fails after the tokenizer is saved.
    failing = TINY.model_copy(update={"env_ids": ("test_arith",), "max_demo_tokens": 16})
    with pytest.raises(Exception, match="longer than max_demo_tokens=16"):
        ensure_default_model(tmp_path, failing)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    with pytest.raises(Exception, match="longer than max_demo_tokens=16"):
        build_default_model(tmp_path / "out", failing)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_out_dir_is_replaced_only_with_force(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with pytest.raises(Exception, match="already exists; pass --force"):
        build_default_model(out, TINY)
    build_default_model(out, TINY, force=True)
    assert not (out / "stale.txt").exists()
    assert (out / "model.safetensors").read_bytes() == (
        tiny_model / "model.safetensors"
    ).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_model_init_with_a_missing_env_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["model", "init", "--out", str(tmp_path / "m"), "--env", "no_such_env"])
    assert code == 1
    assert "environment 'no_such_env', which is not installed" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_public_names_are_exported_and_importing_is_light() -> None:
    import subprocess
    import sys

    import agenthub.agents.default_model as default_model

    for name in default_model.__all__:
        assert hasattr(default_model, name), name
    code = (
        "import sys, agenthub.agents.default_model, agenthub.cli._model\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'tokenizers', 'vllm')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_build_progress_off_a_terminal_says_each_phase_as_it_starts() -> None:
    import io

    from rich.console import Console

    from agenthub.agents.default_model import RichBuildProgress

    out = io.StringIO()
    with RichBuildProgress(Console(file=out, force_terminal=False), transient=True) as shown:
        shown.phase("building the tokenizer")
        assert out.getvalue() == "building the tokenizer ...\n", "said before the phase ends"
        shown.phase("warm start", total=3)
        shown.advance(0.5)
    assert "warm start ...\n" in out.getvalue()

    out = io.StringIO()
    with RichBuildProgress(Console(file=out, force_terminal=False), transient=True):
        pass  # a model already built: not a line, not an empty one
    assert out.getvalue() == ""
