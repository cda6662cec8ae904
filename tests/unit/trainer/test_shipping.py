"""Files between the driver's node and a process on another node: a model read there, a
checkpoint written there and back, and one loaded there, without a filesystem in common. The
node this test runs on plays the other node (`node_id` answers another id than the origin's);
the bytes travel inline rather than through Ray's object store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenthub._errors import AgentHubError
from agenthub.trainer import _shipping
from agenthub.trainer._config import load_config
from agenthub.trainer._shipping import Shipment, receive, receive_replacing

pytestmark = pytest.mark.usefixtures("on_another_node")


@pytest.fixture
def on_another_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shipping, "node_id", lambda: "worker-node")


def shipped(path: Path) -> Shipment:
    return Shipment(str(path), "driver-node", _shipping._pack(path), "digest-" + path.name)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_model_reaches_another_node_as_a_node_local_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shipping, "CACHE", tmp_path / "cache")
    model = tmp_path / "driver" / "my-model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "tokenizer.json").write_text('{"vocab": 1}')
    copy = shipped(model).here()
    assert copy.name == "my-model" and not copy.is_relative_to(tmp_path / "driver")
    assert tree(copy) == tree(model)
    assert shipped(model).here() == copy, "unpacked once per node, then kept"


def test_at_the_origin_nothing_is_copied(tmp_path: Path) -> None:
    here = Shipment(str(tmp_path / "model"), "worker-node", None)
    assert here.here() == tmp_path / "model"
    assert Shipment.of(str(tmp_path)).here() == tmp_path  # a plain path: this node's own
    written: list[Path] = []
    assert here.write_at_origin(str(tmp_path / "out"), written.append) is None
    assert written == [tmp_path / "out"]


def test_what_another_node_writes_comes_back_into_the_run_directory(tmp_path: Path) -> None:
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "step-2").mkdir(parents=True)
    (checkpoints / "step-2" / "kept").write_text("older checkpoint")
    model = Shipment(str(tmp_path / "run" / "model"), "driver-node", b"")

    def save(at: Path) -> None:  # as DeepSpeed lays a checkpoint out
        assert not at.is_relative_to(tmp_path), "written on the node, not at the driver's path"
        (at / "step-4").mkdir(parents=True)
        (at / "step-4" / "mp_rank_00_model_states.pt").write_text("weights")
        (at / "latest").write_text("step-4")

    receive(model.write_at_origin(str(checkpoints), save), checkpoints)
    assert tree(checkpoints) == {
        "latest": "step-4",
        "step-2/kept": "older checkpoint",
        "step-4/mp_rank_00_model_states.pt": "weights",
    }
    loaded = shipped(checkpoints / "step-4")
    with loaded.opened() as path:
        assert path.name == "step-4" and not path.is_relative_to(tmp_path)
        assert (path / "mp_rank_00_model_states.pt").read_text() == "weights"
    assert not path.exists(), "a checkpoint loaded once is not kept on the node"


def test_the_exported_model_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "run" / "model"
    target.mkdir(parents=True)
    (target / "old.safetensors").write_text("step 2")
    origin = Shipment(str(target), "driver-node", b"")

    def export(at: Path) -> None:
        at.mkdir()
        (at / "model.safetensors").write_text("step 4")

    receive_replacing(origin.write_at_origin(str(target), export), target)
    assert tree(target) == {"model.safetensors": "step 4"}
    assert sorted(p.name for p in target.parent.iterdir()) == ["model"], "no leftovers"
    assert origin.write_at_origin(str(target), lambda at: None) is None, "a rank that wrote none"


def test_a_path_never_shipped_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(AgentHubError, match="was not shipped to this one.*every node has joined"):
        Shipment(str(tmp_path), "driver-node", None).here()


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ('ray.learner_resources={"GPU": 1}', "learner_resources names 'GPU'.*learner_num_gpus"),
        ('ray.worker_resources={"my_node": 0}', r"worker_resources\['my_node'\] is 0"),
    ],
)
def test_custom_resources_are_checked(override: str, says: str) -> None:
    with pytest.raises(Exception, match=says):
        load_config([], ["env=math", override])


def test_custom_resources_parse_from_the_command_line() -> None:
    config = load_config([], ["env=math", 'ray.learner_resources={"second_node": 1}'])
    assert config.ray.learner_resources == {"second_node": 1.0}
    assert json.loads(config.model_dump_json())["ray"]["worker_resources"] == {}
