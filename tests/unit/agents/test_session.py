from __future__ import annotations

import copy

import pytest

from agenthub import Message, Task
from agenthub.agents import ChatTemplateError, ChatTokenizer, Generation, Session


def gen(chat: ChatTokenizer, text: str, *, end: bool = True, version: int = 3) -> Generation:
    ids = chat.encode_text(text) + ([chat.closing_ids[0]] if end else [])
    logprobs = tuple(-0.1 * (i + 1) for i in range(len(ids)))
    return Generation(tuple(ids), logprobs, "stop" if end else "length", version)


def test_turns_append_exactly_what_the_template_renders_for_the_whole_conversation(
    chat: ChatTokenizer,
) -> None:
    task = Task(id="t", prompt="Count down with me.")
    session = Session.start(chat, task, [Message(role="user", content="Start at 3.")])
    action = session.add_generation(gen(chat, "2"))
    session.add_observation([Message(role="user", content="1 (noise)")], policy_version=4)
    session.add_generation(gen(chat, "0"))
    assert action == "2"
    conversation = [
        Message(role="user", content="Count down with me."),
        Message(role="user", content="Start at 3."),
        Message(role="assistant", content="2"),
        Message(role="user", content="1 (noise)"),
    ]
    expected = chat.encode_prompt(conversation) + chat.encode_text("0") + [chat.closing_ids[0]]
    assert session.tokens == expected


def test_sampled_tokens_are_kept_with_mask_logprobs_and_versions(chat: ChatTokenizer) -> None:
    session = Session.start(chat, Task(id="t", prompt="hi"), [], policy_version=1)
    prompt_len = len(session)
    g = gen(chat, "Hello, world!", version=7)
    session.add_generation(g)
    assert session.tokens[prompt_len:] == list(g.token_ids)
    assert session.logprobs[prompt_len:] == list(g.logprobs)
    assert session.loss_mask == [0] * prompt_len + [1] * len(g.token_ids)
    assert session.logprobs[:prompt_len] == [0.0] * prompt_len
    assert session.policy_versions == [1] * prompt_len + [7] * len(g.token_ids)


def test_reply_cut_off_by_length_is_closed_with_masked_template_tokens(
    chat: ChatTokenizer,
) -> None:
    session = Session.start(chat, Task(id="t", prompt="hi"), [])
    session.add_generation(gen(chat, "Hello", end=False))
    before = len(session)
    session.add_observation([Message(role="user", content="go on")], policy_version=0)
    added = session.tokens[before:]
    closing = list(chat.closing_ids)
    assert added[: len(closing)] == closing
    assert session.loss_mask[before:] == [0] * len(added)
    assert chat.tokenizer.decode(added).endswith("<|im_start|>assistant\n")


def test_reply_ending_on_end_of_turn_only_gets_the_rest_of_the_closing(
    chat: ChatTokenizer,
) -> None:
    assert chat.missing_closing([5, chat.closing_ids[0]]) == list(chat.closing_ids[1:])
    assert chat.missing_closing([5]) == list(chat.closing_ids)
    assert chat.missing_closing(list(chat.closing_ids)) == []


def test_text_observations_are_tokenized_as_text(chat: ChatTokenizer) -> None:
    task = Task(id="t", prompt="2 + 2 =")
    session = Session.start(chat, task, " ", chat_template=False)
    assert session.tokens == chat.encode_text("2 + 2 =") + chat.encode_text(" ")
    session.add_generation(gen(chat, " 4", end=False))
    before = len(session)
    session.add_observation(" Correct.", policy_version=0)
    assert session.tokens[before:] == chat.encode_text(" Correct.")


def test_history_is_never_retokenized(chat: ChatTokenizer) -> None:
    session = Session.start(chat, Task(id="t", prompt="x"), [])
    sampled = gen(chat, "Hello", end=False)
    session.add_generation(sampled)
    snapshot = list(session.tokens)
    session.add_observation([Message(role="user", content="more")], policy_version=0)
    assert session.tokens[: len(snapshot)] == snapshot


def test_the_env_s_system_prompt_leads_a_prompt_without_one_of_its_own(
    chat: ChatTokenizer,
) -> None:
    rules = Message(role="system", content="Answer with one number.")
    user = Message(role="user", content="Count down.")
    for prompt in ("Count down.", (user,)):
        session = Session.start(chat, Task(id="t", prompt=prompt), [], system_prompt=rules.content)
        assert session.tokens == chat.encode_prompt([rules, user])
    own = Message(role="system", content="The task's own rules.")
    session = Session.start(chat, Task(id="t", prompt=(own, user)), [], system_prompt="ignored")
    assert session.tokens == chat.encode_prompt([own, user])
    with pytest.raises(ChatTemplateError, match="sets a system_prompt but the chat template"):
        Session.start(chat, Task(id="t", prompt="hi"), "", chat_template=False, system_prompt="x")


def test_chat_prompt_without_chat_template_is_refused(chat: ChatTokenizer) -> None:
    task = Task(id="t", prompt=(Message(role="user", content="hi"),))
    with pytest.raises(ChatTemplateError, match="chat template is turned off"):
        Session.start(chat, task, [], chat_template=False)
    # Nor are first messages from the env dropped without a word.
    messages = [Message(role="user", content="Begin.")]
    with pytest.raises(ChatTemplateError, match="answered reset on task 't' with chat messages"):
        Session.start(chat, Task(id="t", prompt="hi"), messages, chat_template=False)
    session = Session.start(chat, Task(id="t", prompt="hi"), "", chat_template=False)
    session.add_generation(gen(chat, " there"))
    with pytest.raises(ChatTemplateError, match="answered with chat messages but the chat temp"):
        session.add_observation(messages, policy_version=0)


def test_rollback_drops_the_tail(chat: ChatTokenizer) -> None:
    session = Session.start(chat, Task(id="t", prompt="x"), [])
    n = len(session)
    session.add_generation(gen(chat, "abc"))
    session.rollback(n)
    assert len(session.tokens) == len(session.loss_mask) == len(session.logprobs) == n


def test_a_template_that_leaves_a_message_out_is_refused(chat: ChatTokenizer) -> None:
    dropping = copy.copy(chat.tokenizer)
    # Renders only system, user and assistant turns, skipping any other role without a word.
    dropping.chat_template = chat.tokenizer.chat_template.replace(
        "{%- for message in messages %}",
        "{%- for message in messages if message.role in ['system', 'user', 'assistant'] %}",
    )
    assert dropping.chat_template != chat.tokenizer.chat_template
    dropping_chat = ChatTokenizer(dropping)
    session = Session.start(dropping_chat, Task(id="t", prompt="x"), [])
    session.add_generation(gen(dropping_chat, "call the tool"))
    with pytest.raises(ChatTemplateError, match="leaves out the text of a 'tool' message"):
        session.add_observation([Message(role="tool", content="20")], policy_version=0)
    with pytest.raises(ChatTemplateError, match="leaves out the text of a 'tool' message"):
        dropping_chat.encode_prompt([Message(role="user", content="x"),
                                     Message(role="tool", content="20")])  # fmt: skip


# -- tools ------------------------------------------------------------------------------------

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}


def test_tools_open_the_episode_and_turns_still_append_exactly(tool_chat: ChatTokenizer) -> None:
    task = Task(id="t", prompt=(Message(role="system", content="Be brief."),
                                Message(role="user", content="What is 2 + 3?")))  # fmt: skip
    session = Session.start(tool_chat, task, [], tools=[ADD])
    opening = tool_chat.decode(session.tokens)
    assert opening.index("Be brief.") < opening.index('"name": "add"') < opening.index("2 + 3")
    session.add_generation(gen(tool_chat, '<tool_call>{"name": "add"}</tool_call>'))
    session.add_observation([Message(role="tool", content="5", name="add")], policy_version=4)
    session.add_generation(gen(tool_chat, "5"))
    conversation = [
        *task.messages(),
        Message(role="assistant", content='<tool_call>{"name": "add"}</tool_call>'),
        Message(role="tool", content="5", name="add"),
    ]
    expected = tool_chat.encode_prompt(conversation, [ADD]) + tool_chat.encode_text("5")
    assert session.tokens == [*expected, tool_chat.closing_ids[0]]
    # Without tools the template renders what it did before it knew about them.
    assert tool_chat.render(task.messages(), add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_tools_are_refused_by_a_template_that_would_not_show_them(chat: ChatTokenizer) -> None:
    # The test tokenizer's own template ignores `tools`: the model would never see them.
    with pytest.raises(ChatTemplateError, match=r"does not show the model the tools \['add'\]"):
        Session.start(chat, Task(id="t", prompt="What is 2 + 3?"), [], tools=[ADD])


def test_tools_are_refused_with_the_chat_template_off(tool_chat: ChatTokenizer) -> None:
    with pytest.raises(ChatTemplateError, match="offers tools .*'add'.* turned off"):
        Session.start(tool_chat, Task(id="t", prompt="x"), "", tools=[ADD], chat_template=False)


def test_message_name_and_call_id_reach_the_template_only_when_set(chat: ChatTokenizer) -> None:
    assert Message(role="user", content="x").model_dump() == {"role": "user", "content": "x"}
    named = Message(role="tool", content="5", name="add", tool_call_id="call-1")
    assert named.model_dump() == {
        "role": "tool", "content": "5", "name": "add", "tool_call_id": "call-1"
    }  # fmt: skip
    naming = copy.copy(chat.tokenizer)
    naming.chat_template = chat.tokenizer.chat_template.replace(
        "message['content']",
        "(message.name + ': ' if message.name is defined else '') + message['content']",
    )
    text = ChatTokenizer(naming).render(
        [Message(role="user", content="hi"), named], add_generation_prompt=False
    )
    assert "user\nhi<|im_end|>" in text and "tool\nadd: 5<|im_end|>" in text


def test_a_template_that_dresses_the_last_reply_differently_still_appends(
    chat: ChatTokenizer,
) -> None:
    # As Qwen3's does: the final assistant reply gets an empty think block, which goes once
    # more messages follow it. Only what follows the reply counts for a follow-up.
    dressing = copy.copy(chat.tokenizer)
    dressing.chat_template = (
        "{%- for message in messages %}"
        "{%- if message.role == 'assistant' and loop.last %}"
        "{{- '<|im_start|>assistant\\n<think></think>' + message.content + '<|im_end|>\\n' }}"
        "{%- else %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    dressed = ChatTokenizer(dressing)
    session = Session.start(dressed, Task(id="t", prompt="Count down."), [])
    session.add_generation(gen(dressed, "2"))
    session.add_observation([Message(role="tool", content="1 (noise)")], policy_version=0)
    expected = "<|im_start|>tool\n1 (noise)<|im_end|>\n<|im_start|>assistant\n"
    assert dressed.tokenizer.decode(session.tokens).endswith(f"2<|im_end|>\n{expected}")
    assert session.tokens[-len(dressed.encode_text(expected)) :] == dressed.encode_text(expected)


def test_a_template_that_rewrites_earlier_turns_is_refused(chat: ChatTokenizer) -> None:
    # The user's text is shown only while it is the last user turn: not append-only.
    rewriting = copy.copy(chat.tokenizer)
    rewriting.chat_template = chat.tokenizer.chat_template.replace(
        "message['content']",
        "(message['content'] if loop.revindex <= 2 else '...')",
    )
    rewritten = ChatTokenizer(rewriting)
    session = Session.start(rewritten, Task(id="t", prompt="Count down."), [])
    session.add_generation(gen(rewritten, "2"))
    with pytest.raises(ChatTemplateError, match="renders earlier turns differently"):
        session.add_observation([Message(role="user", content="1 (noise)")], policy_version=0)
