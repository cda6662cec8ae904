"""`agenthub config from-openrlhf`: OpenRLHF's documented recipes become configs that load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agenthub.cli._main import main
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._openrlhf_flags import split_command, translate

# The recipes of OpenRLHF's training guide, as it prints them.
PPO = """
ray job submit --address="http://127.0.0.1:8265" \\
-- python3 -m openrlhf.cli.train_ppo_ray \\
--ref_num_nodes 1 --ref_num_gpus_per_node 8 \\
--reward_num_nodes 1 --reward_num_gpus_per_node 8 \\
--critic_num_nodes 1 --critic_num_gpus_per_node 8 \\
--actor_num_nodes 1 --actor_num_gpus_per_node 8 \\
--vllm_num_engines 4 --vllm_tensor_parallel_size 2 \\
--colocate_all_models \\
--pretrain OpenRLHF/Llama-3-8b-sft-mixture \\
--reward_pretrain ./output/llama3-8b-rm \\
--save_path ./output/llama3-8b-ppo \\
--micro_train_batch_size 8 --train_batch_size 128 \\
--micro_rollout_batch_size 16 --rollout_batch_size 1024 \\
--max_epochs 1 --prompt_max_len 1024 --generate_max_len 1024 \\
--zero_stage 3 --bf16 \\
--actor_learning_rate 5e-7 --critic_learning_rate 9e-6 \\
--init_kl_coef 0.01 --normalize_reward \\
--vllm_enable_sleep --deepspeed_enable_sleep
"""
GRPO = """
ray job submit --address="http://127.0.0.1:8265" \\
-- python3 -m openrlhf.cli.train_ppo_ray \\
--advantage_estimator group_norm \\
--ref_num_nodes 1 --ref_num_gpus_per_node 8 \\
--reward_num_nodes 1 --reward_num_gpus_per_node 8 \\
--actor_num_nodes 1 --actor_num_gpus_per_node 8 \\
--vllm_num_engines 4 --vllm_tensor_parallel_size 2 \\
--colocate_all_models \\
--pretrain OpenRLHF/Llama-3-8b-sft-mixture \\
--reward_pretrain OpenRLHF/Llama-3-8b-rm-700k \\
--save_path ./output/llama3-8b-grpo \\
--micro_train_batch_size 8 --train_batch_size 128 \\
--micro_rollout_batch_size 16 --rollout_batch_size 1024 \\
--max_epochs 1 --bf16 \\
--actor_learning_rate 5e-7 \\
--init_kl_coef 0.01 --use_kl_loss --kl_estimator k3 \\
--normalize_reward --no_advantage_std_norm
"""
REINFORCE_PP = """
--advantage_estimator reinforce
--critic_pretrain None # No critic needed
--init_kl_coef 0.01
--actor_learning_rate 1e-6
"""
REINFORCE_PP_BASELINE = """
--advantage_estimator reinforce_baseline
--n_samples_per_prompt 4 # Must be > 1
--init_kl_coef 0.01
"""
RLOO = """
--advantage_estimator rloo
--n_samples_per_prompt 4 # Must be > 1
--init_kl_coef 0.01
"""
DR_GRPO = """
--advantage_estimator dr_grpo
--init_kl_coef 0.01
"""
RECIPES = {
    "gae": PPO,
    "group_norm": GRPO,
    "reinforce": REINFORCE_PP,
    "reinforce_baseline": REINFORCE_PP_BASELINE,
    "rloo": RLOO,
    "dr_grpo": DR_GRPO,
}


def loaded(text: str, tmp_path: Path) -> TrainConfig:
    """The translation as `agenthub train --config` reads it (the env given at train time)."""
    path = tmp_path / "config.toml"
    path.write_text(translate(split_command(text)).toml(), encoding="utf-8")
    return load_config([path], ["env=reward_func"])


@pytest.mark.parametrize("estimator", sorted(RECIPES))
def test_each_documented_recipe_translates_and_loads(estimator: str, tmp_path: Path) -> None:
    config = loaded(RECIPES[estimator], tmp_path)
    assert config.algorithm.estimator == estimator
    assert config.learner.kl_coef == 0.01
    assert (config.learner.critic is not None) == (estimator == "gae")
    assert config.algorithm.max_staleness == 0, "OpenRLHF trains synchronously by default"
    assert not config.algorithm.filter_groups, "OpenRLHF filters only when told to"
    assert (config.learner.eps_low, config.learner.eps_high) == (0.2, 0.2)


def test_ppo_recipe_keeps_openrlhf_meanings(tmp_path: Path) -> None:
    config = loaded(PPO, tmp_path)
    assert config.model == "OpenRLHF/Llama-3-8b-sft-mixture"
    assert (config.learner.kl_mode, config.learner.kl_estimator) == ("reward", "k1")
    assert config.learner.critic is not None
    assert (config.learner.critic.lr, config.learner.critic.lam) == (9e-6, 1.0)
    assert config.learner.critic.value_clip == 0.5
    assert config.rollout.n_samples_per_prompt == 1
    assert config.rollout.max_reply_tokens == 1024
    assert config.learner.zero_stage == 3 and config.learner.lr == 5e-7
    assert config.learner.micro_batch_size == 8 and config.algorithm.batch_groups == 128
    assert config.rollout.chat_template is False and config.learner.importance_mode == "none"
    unmapped = {u.flag.split()[0] for u in translate(split_command(PPO)).unmapped}
    assert {"--colocate_all_models", "--reward_pretrain", "--prompt_max_len"} <= unmapped
    assert "--vllm_num_engines" in unmapped and "--normalize_reward" in unmapped
    # --vllm_tensor_parallel_size 2: each engine over 2 GPUs, which its rollout worker holds.
    assert "--vllm_tensor_parallel_size" not in unmapped
    assert (config.rollout.tensor_parallel_size, config.ray.worker_num_gpus) == (2, 2)
    dotted = translate(split_command("--vllm.tensor_parallel_size 4")).settings["rollout"]
    assert dotted["tensor_parallel_size"] == 4


def test_grpo_recipe_keeps_kl_loss_and_std_switch(tmp_path: Path) -> None:
    config = loaded(GRPO, tmp_path)
    assert (config.learner.kl_mode, config.learner.kl_estimator) == ("loss", "k3")
    assert config.algorithm.advantage_std_norm is False
    assert config.rollout.n_samples_per_prompt == 8, "no count given: agenthub's default"
    notes = translate(split_command(GRPO)).notes
    assert any("--n_samples_per_prompt" in note for note in notes)


def test_old_and_dotted_flags_translate_alike() -> None:
    old = translate(
        split_command(
            "--advantage_estimator group_norm --n_samples_per_prompt 8 --init_kl_coef 0.01 "
            "--use_kl_loss --kl_estimator k3 --eps_clip_low_high 0.2 0.28 --temperature 0.9 "
            "--enable_vllm_is_correction --vllm_is_correction_type icepop"
        )
    )
    dotted = translate(
        split_command(
            "--algo.advantage.estimator group_norm --rollout.n_samples_per_prompt=8 "
            "--algo.kl.init_coef 0.01 --algo.kl.use_loss --algo.kl.estimator k3 "
            "--actor.eps_clip_low_high 0.2 0.28 --rollout.temperature 0.9 "
            "--algo.advantage.is_correction_enable --algo.advantage.is_correction_type icepop"
        )
    )
    assert old.settings == dotted.settings
    assert old.settings["learner"]["importance_mode"] == "icepop"
    assert old.settings["learner"]["eps_high"] == 0.28
    assert old.unmapped == dotted.unmapped == []


def test_the_adaptive_kl_controller_translates_in_either_spelling() -> None:
    old = translate(
        split_command("--advantage_estimator reinforce --kl_target 0.1 --kl_horizon 5000")
    )
    dotted = translate(
        split_command(
            "--algo.advantage.estimator reinforce --algo.kl.target 0.1 --algo.kl.horizon 5000"
        )
    )
    for translation in (old, dotted):
        assert translation.settings["learner"]["kl_target"] == 0.1
        assert translation.settings["learner"]["kl_horizon"] == 5000
        assert not translation.unmapped
    fixed = translate(split_command("--advantage_estimator reinforce --kl_horizon 5000"))
    assert "kl_target" not in fixed.settings["learner"] and not fixed.unmapped


def test_reward_shaping_flags_translate_in_either_spelling(tmp_path: Path) -> None:
    old = (
        "--advantage_estimator group_norm --n_samples_per_prompt 4 --max_new_tokens 1024 "
        "--reward_clip_range -5 5 --overlong_buffer_len 256 --overlong_penalty_factor 0.5 "
        "--stop_properly_penalty_coef -0.5"
    )
    dotted = (
        "--algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 4 "
        "--rollout.max_new_tokens 1024 --reward.clip_range -5 5 "
        "--reward.overlong_buffer_len 256 --reward.overlong_penalty_factor 0.5 "
        "--reward.stop_properly_penalty_coef -0.5"
    )
    translation = translate(split_command(old))
    assert translation.settings == translate(split_command(dotted)).settings
    assert translation.unmapped == []
    assert translation.settings["reward"] == {
        "clip_range": [-5.0, 5.0],
        "overlong_buffer_len": 256,
        "overlong_penalty_factor": 0.5,
        "stop_properly_penalty_coef": -0.5,
    }
    config = loaded(old, tmp_path)
    assert config.reward.clip_range == (-5.0, 5.0)
    assert config.reward.overlong_buffer_len == 256 and config.rollout.max_reply_tokens == 1024
    assert config.reward.stop_properly_penalty_coef == -0.5


@pytest.mark.parametrize("estimator", sorted(RECIPES))
def test_a_recipe_clips_rewards_at_openrlhfs_default(estimator: str, tmp_path: Path) -> None:
    assert loaded(RECIPES[estimator], tmp_path).reward.clip_range == (-10.0, 10.0)
    assert load_config([], ["env=reward_func"]).reward.clip_range is None, "agenthub's default"


def test_the_overlong_buffer_ends_where_openrlhf_ends_it(tmp_path: Path) -> None:
    # Without --max_new_tokens, OpenRLHF measures the buffer against --max_len.
    translation = translate(split_command("--max_len 4096 --overlong_buffer_len 512"))
    assert translation.settings["rollout"]["max_reply_tokens"] == 4096
    assert any("--max_len" in note for note in translation.notes)
    config = loaded("--overlong_buffer_len 512", tmp_path)
    assert config.rollout.max_reply_tokens == 2048, "OpenRLHF's default --max_len"
    with pytest.raises(ValueError, match="longer than a reply may be"):
        translate(split_command("--max_new_tokens 128 --overlong_buffer_len 512"))


def test_reward_shaping_flags_openrlhf_ignores_or_refuses() -> None:
    alone = translate(split_command("--overlong_penalty_factor 2"))
    assert [(u.flag, u.reason) for u in alone.unmapped] == [
        (
            "--overlong_penalty_factor 2",
            "OpenRLHF applies it only with --overlong_buffer_len, which the command does not give",
        )
    ]
    assert "overlong_penalty_factor" not in alone.settings["reward"]
    with pytest.raises(ValueError, match=r"must be in \[0, 1\] or negative"):
        translate(split_command("--stop_properly_penalty_coef 2"))
    with pytest.raises(ValueError, match="two numbers, low then high"):
        translate(split_command("--reward_clip_range 10 -10"))


def test_every_unmapped_flag_has_a_reason() -> None:
    translation = translate(split_command(PPO + "--frobnicate 3 --gamma 0.9"))
    reasons = {u.flag: u.reason for u in translation.unmapped}
    assert reasons["--frobnicate 3"].startswith("not a train_ppo_ray flag this translator knows")
    assert all(reason and "\n" not in reason for reason in reasons.values())
    assert translation.settings["learner"]["critic"]["gamma"] == 0.9


def test_an_env_comes_from_the_reward_url_or_the_agent_file(tmp_path: Path) -> None:
    reward = translate(
        split_command(
            "--advantage_estimator rloo --n_samples_per_prompt 4 --remote_rm_url r.py "
            "--prompt_data tasks.jsonl --input_key question --label_key answer"
        )
    )
    assert reward.settings["env"] == "reward_func"
    assert reward.settings["env_kwargs"] == {
        "remote_rm_url": "r.py",
        "dataset": "tasks.jsonl",
        "input_key": "question",
        "label_key": "answer",
    }
    agent = translate(split_command("--train.agent_func_path agent.py"))
    assert (agent.settings["env"], agent.settings["env_kwargs"]) == (
        "openrlhf_agent",
        {"agent_func": "agent.py"},
    )


def test_commands_openrlhf_refuses_are_refused() -> None:
    with pytest.raises(ValueError, match="needs --n_samples_per_prompt of 2 or more"):
        translate(split_command("--advantage_estimator rloo --n_samples_per_prompt 1"))
    with pytest.raises(ValueError, match="not one of OpenRLHF's estimators"):
        translate(split_command("--advantage_estimator grpo"))
    with pytest.raises(ValueError, match="takes a number"):
        translate(split_command("--init_kl_coef lots"))
    with pytest.raises(ValueError, match="comes before any flag"):
        translate(split_command("group_norm"))


def test_the_command_writes_a_config_train_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "grpo.toml"
    flags = ["--advantage_estimator", "group_norm", "--n_samples_per_prompt", "4"]
    more = ["--kl_target", "1", "--colocate_all_models"]
    command = ["config", "from-openrlhf", "--out", str(out), "--", *flags, *more]
    assert main(command) == 0
    printed = capsys.readouterr()
    assert f"wrote {out}" in printed.out
    assert "not translated: --colocate_all_models: GPU sharing" in printed.out
    script = tmp_path / "train.sh"
    script.write_text("python3 -m openrlhf.cli.train_ppo_ray \\\n  " + " ".join(flags) + "\n")
    assert main(["config", "from-openrlhf", "--file", str(script)]) == 0
    toml = capsys.readouterr().out
    assert 'estimator = "group_norm"' in toml and "n_samples_per_prompt = 4" in toml
    main(["train", "--config", str(out), "--env", "reward_func", "--print-config"])
    resolved = json.loads(capsys.readouterr().out)
    assert resolved["algorithm"]["estimator"] == "group_norm"
    assert resolved["rollout"]["n_samples_per_prompt"] == 4
    assert resolved["learner"]["kl_target"] == 1


def test_the_command_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "from-openrlhf"]) == 1
    assert "give the OpenRLHF command's flags after --" in capsys.readouterr().err
