"""The view reads a model's tokenizer without transformers: each token's text and kind are the
ones the Hugging Face tokenizer gives (what the REPL and the trainer use), and the server never
imports torch or transformers, also after it has decoded an episode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agenthub._types import Message
from agenthub.agents import ChatTokenizer, Timings, Trajectory
from agenthub.agents.default_model._tokenizer import train_tokenizer
from agenthub.view import TokenizerLookup, token_kinds
from agenthub.view._tokens import pieces
from tests.tiny_model import build_tokenizer

TEXTS = [
    "You are a helpful assistant. Write a Python function that returns the sum.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "What is 12 + 30? The answer is 42. Wrong answer, try again.",
    '<tool_call>{"name": "run", "arguments": {"code": "x = 1"}}</tool_call>',
]


@pytest.fixture(scope="module", params=["default", "tiny"])
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default model's tokenizer (built by its own builder, on a small corpus)
    and the tests' tiny one (a pad token and an extra special token of its own)."""
    out: Path = tmp_path_factory.mktemp(request.param)
    if request.param == "default":
        train_tokenizer(TEXTS * 20, 500, out)
    else:
        build_tokenizer(out)
    return out


def loaded(model_dir: Path) -> tuple[ChatTokenizer, ChatTokenizer]:
    """The transformers tokenizer and the view's reading of the same directory."""
    light, why = TokenizerLookup(model_dir).find(None, None)
    assert light is not None, why
    return ChatTokenizer.from_pretrained(model_dir), light


def episodes(chat: ChatTokenizer) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks of a few episodes: a chat with a reply, a tool answer and a
    second reply cut off mid-character; special tokens on their own; bytes of characters the
    vocabulary has no piece for; an id past the vocabulary."""
    prompt = chat.encode_prompt(
        [
            Message(role="system", content="You are a helpful assistant."),
            Message(role="user", content="Sum 2 and 3, naïvely 🙂 — then say «done»."),
        ]
    )
    reply = [*chat.encode_text("def add(a, b):\n\treturn a + b  # ✓"), *chat.stop_token_ids]
    answer = chat.missing_closing(reply) + chat.encode_followup(
        [Message(role="tool", content="5 — correct 🎉")]
    )
    cut = chat.encode_text("The answer is 5 🙂")[:-1]
    chat_tokens = prompt + reply + answer + cut
    chat_mask = [0] * len(prompt) + [1] * len(reply) + [0] * len(answer) + [1] * len(cut)
    special = list(chat.tokenizer.all_special_ids) + list(chat.stop_token_ids)
    unicode = chat.encode_text("日本語 ünïcödé ∑ 😀\r\n\x00")
    beyond = [len(chat.tokenizer) + 5, 0, 1]
    return [
        (chat_tokens, chat_mask),
        (special, [0] * len(special)),
        (unicode, [1] * len(unicode)),
        (beyond, [0, 1, 0]),
    ]


def test_tokens_decode_to_the_texts_transformers_gives(model_dir: Path) -> None:
    hf, light = loaded(model_dir)
    shown = []
    for tokens, mask in episodes(hf):
        shown += pieces(light, tokens)
        assert pieces(light, tokens) == pieces(hf, tokens)
        assert token_kinds(tokens, mask, light) == token_kinds(tokens, mask, hf)
    # what the comparison covered: special tokens, byte-level pieces of one character, all kinds
    assert "<|im_end|>" in shown and "<|im_start|>" in shown and "\ufffd" in shown
    tokens, mask = episodes(hf)[0]
    assert {"prompt", "model", "env"} <= set(token_kinds(tokens, mask, light))


def test_the_chat_template_and_stop_tokens_are_transformers(model_dir: Path) -> None:
    hf, light = loaded(model_dir)
    messages = [Message(role="user", content="x")]
    tools = [{"type": "function", "function": {"name": "run", "parameters": {}}}]
    assert light.render(messages, add_generation_prompt=True) == hf.render(
        messages, add_generation_prompt=True
    )
    assert light.render(messages, add_generation_prompt=False, tools=tools) == hf.render(
        messages, add_generation_prompt=False, tools=tools
    )
    assert light.stop_token_ids == hf.stop_token_ids and light.closing_ids == hf.closing_ids
    assert light.encode_prompt(messages) == hf.encode_prompt(messages)
    assert sorted(light.tokenizer.all_special_ids) == sorted(hf.tokenizer.all_special_ids)


def test_a_model_without_tokenizer_json_is_shown_as_ids_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    chat, why = TokenizerLookup(tmp_path).find(None, "default")
    assert chat is None
    assert "has no tokenizer.json" in why and "tokens shown as ids" in why


def test_the_server_decodes_an_episode_without_torch_or_transformers(
    model_dir: Path, tmp_path: Path
) -> None:
    hf = ChatTokenizer.from_pretrained(model_dir)
    tokens, mask = episodes(hf)[0]
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").write_text(json.dumps({"env": "guess", "model": str(model_dir)}))
    episode = Trajectory(
        env="guess",
        task_id="t0",
        tokens=tokens,
        loss_mask=mask,
        logprobs=[0.0] * len(tokens),
        policy_versions=[0] * len(tokens),
        step_rewards=[1.0],
        reward=1.0,
        terminated=True,
        truncated=False,
        num_turns=2,
        timings=Timings(total_s=1.0),
    )
    (run / "trajectories.jsonl").write_text(episode.model_dump_json() + "\n")
    heavy = ("torch", "transformers", "vllm", "ray", "deepspeed")
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from starlette.testclient import TestClient\n"
        "import agenthub.cli\n"
        "from agenthub.view import create_app\n"
        f"app = create_app([Path({str(run)!r})])\n"
        "client = TestClient(app, base_url='http://127.0.0.1')\n"
        "episode = client.get('/api/runs/0/episodes/0').json()\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))\n"
        "print(json.dumps([episode['pieces'], episode['notices'], loaded]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    shown, notices, loaded_heavy = json.loads(result.stdout)
    assert notices == [] and shown == pieces(hf, tokens)
    assert loaded_heavy == []


def test_a_template_with_generation_blocks_renders_as_in_transformers(tmp_path: Path) -> None:
    build_tokenizer(tmp_path)
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{% endgeneration %}"
        "{% else %}{{ m['content'] | tojson }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": template})
    )
    hf, light = loaded(tmp_path)
    messages = [Message(role="user", content="«x»"), Message(role="assistant", content="4")]
    for prompt in (True, False):
        assert light.render(messages, add_generation_prompt=prompt) == hf.render(
            messages, add_generation_prompt=prompt
        )
    assert light.closing_ids == hf.closing_ids and light.stop_token_ids == hf.stop_token_ids
