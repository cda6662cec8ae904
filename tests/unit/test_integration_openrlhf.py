"""`agenthub export openrlhf`: the agent file it writes plays the env under agenthub's own
`openrlhf_agent` env (OpenRLHF's classes are agenthub's stand-ins here; the real OpenRLHF
runs it in tests/integration/hubs/test_integration_openrlhf.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agenthub
from agenthub.cli import main
from agenthub.integrations.openrlhf import EnvAgent, Reward, feedback_text

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    out = tmp_path / "agent_func.py"
    assert main(["export", "openrlhf", "--env", "math", "max_attempts=2", "-o", str(out)]) == 0
    return out


def dataset(tmp_path: Path) -> str:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"prompt": "What is 6 * 7? Answer in \\boxed{}.", "label": "42"}))
    return str(path)


async def test_the_exported_file_plays_math_under_the_openrlhf_agent_env(
    exported: Path, tmp_path: Path
) -> None:
    env = agenthub.make("openrlhf_agent", agent_func=str(exported), dataset=dataset(tmp_path))
    [task] = env.tasks("train")
    opening, _ = await env.reset(task)
    assert opening == ""
    wrong = await env.step("\\boxed{41}")
    assert (wrong.reward, wrong.done) == (0.0, False)
    assert wrong.observation.startswith("\nuser: Incorrect, try again.")
    assert wrong.observation.endswith("\nassistant: ")
    right = await env.step("\\boxed{42}")
    assert (right.reward, right.score, right.terminated) == (1.0, 1.0, True)
    assert right.extra_logs == {"attempts": 2.0, "correct": 1.0}
    await env.aclose()


async def test_the_agent_speaks_openrlhf_s_protocol() -> None:
    agent = EnvAgent("math")
    states = {"observation": "What is 1 + 1?", "label": "2"}
    assert await agent.reset(states) == {"observation": "What is 1 + 1?"}
    result = await agent.step({"action_text": "\\boxed{2}", "label": "2", "sampling_params": 7})
    assert result["rewards"].item() == 1.0 and isinstance(result["rewards"], Reward)
    assert (result["done"], result["sampling_params"], result["environment_feedback"]) == (
        True,
        7,
        "",
    )
    with pytest.raises(RuntimeError, match="step before reset"):
        await agent.step({"action_text": "x"})


def test_feedback_is_text_as_is_and_messages_as_plain_turns() -> None:
    assert feedback_text("more") == "more"
    assert feedback_text([]) == ""
    said = [agenthub.Message(role="tool", content="3")]
    assert feedback_text(said) == "\ntool: 3\nassistant: "


def test_export_refuses_an_unknown_env_and_an_existing_file(
    exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["export", "openrlhf", "--env", "no_such_env", "-o", str(exported.parent / "x")]) == 1
    )
    assert "no environment 'no_such_env'" in capsys.readouterr().err
    assert main(["export", "openrlhf", "--env", "math", "-o", str(exported)]) == 1
    assert "--force" in capsys.readouterr().err
    assert main(["export", "openrlhf", "--env", "math", "-o", str(exported), "--force"]) == 0
