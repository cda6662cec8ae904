"""The DeepSpeed learner: one policy-gradient step per batch, weights out for the engines."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from agenthub.trainer._batch import MicroBatch, TrainBatch, plan_micro_batches
from agenthub.trainer._critic import Critic
from agenthub.trainer._importance import GapMeter, importance_weights
from agenthub.trainer._learner_config import LearnerConfig
from agenthub.trainer._logprobs import PolicyModel, packed_logprobs, train_without_dropout
from agenthub.trainer._loss import KLController, kl_divergence, policy_loss
from agenthub.trainer._ranks import all_reduce, join_alone, rank, world_size
from agenthub.trainer._single_rank import SINGLE_RANK_STATE, SingleRankEngine

MODEL_CHECKPOINT = "agenthub_checkpoint.json"
"""In an exported policy directory: the training checkpoint it was written with."""


def _init_distributed() -> None:
    """DeepSpeed's communication over the learner's group: the one `LearnerWorker` joined for
    a learner of several ranks, or a group of this process alone."""
    import deepspeed

    from agenthub.trainer._deepspeed_compat import skip_shared_memory_comm

    join_alone()
    # DeepSpeed builds its shared-memory all-reduce for CPU ranks (a C++ op compiled on first
    # use, half a minute of both cores) when it starts its communication backend. Only its
    # inference all-reduce (AutoTP) calls it; training reduces through torch.distributed
    # (gloo on CPU), so the op is marked as not wanted, for any number of ranks.
    skip_shared_memory_comm()
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")


def check_checkpoint_ranks(path: Path, ranks: int) -> None:
    """Refuse a checkpoint that another number of ranks wrote: DeepSpeed saves one file of
    optimizer states per rank under ZeRO 1-3, and would fail on another count with a message
    about shapes; a learner of one rank saves its own (`SingleRankEngine`)."""
    saved = len(list(path.glob("*zero_pp_rank_*_optim_states.pt")))
    if (path / SINGLE_RANK_STATE).is_file():
        saved = 1
    if saved and saved != ranks:
        raise ValueError(
            f"the learner checkpoint {path} was saved by a learner of {saved} ranks (its "
            f"optimizer states are sharded {saved} ways) and this learner has {ranks}; resume "
            f"with ray.learner_ranks={saved}"
        )


def _device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _bf16(asked: bool | None) -> bool:
    if asked is not None:
        return asked
    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


class Learner:
    """Owns the policy under a DeepSpeed engine and takes one optimisation step per batch.

    `step` computes the learner's logprobs of the batch before updating (`old`), weights
    tokens by the off-policy correction between those and the rollout engine's logprobs,
    applies PPO-clip (and a KL term when `kl_coef` > 0, its weight adapted after each step
    when `kl_target` is set), accumulates over micro-batches and steps the optimiser once per
    epoch (`epochs`; with one, `old` costs no extra pass). The step's metrics include the
    train/inference gap between `old` and the rollout logprobs (see `GapMeter`): a token is
    current when the batch says policy version `steps` sampled it.
    With a critic (`config.critic`), the batch carries episode rewards and the critic's
    per-token GAE advantages replace its sequence advantages; the critic then takes its own
    step on the returns. `state_dict` returns the policy's full weights (gathered under
    ZeRO-3) for the engines; `policy` is the Hugging Face model being trained (its weights
    under its own names), and `engine` the DeepSpeed engine around it, whose forward pass
    takes packed sequences and returns token logprobs (`PolicyModel`).
    """

    def __init__(self, model_path: str | Path, config: LearnerConfig | None = None) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config or LearnerConfig()
        self.model_path = Path(model_path)
        _init_distributed()
        self.rank, self.world_size = rank(), world_size()
        self.bf16 = _bf16(self.config.bf16)
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        model = train_without_dropout(AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype))
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable({"use_reentrant": False})
        self.policy = model
        self.engine = self._engine(PolicyModel(model, self.config.logprob_chunk_tokens))
        self.reference: PolicyModel | None = None
        if self.config.kl_coef > 0:
            reference = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
            reference.to(self.engine.device).eval().requires_grad_(False)
            self.reference = PolicyModel(reference, self.config.logprob_chunk_tokens)
        self.kl = KLController(self.config.kl_coef, self.config.kl_target, self.config.kl_horizon)
        self.critic: Critic | None = None
        if self.config.critic is not None:
            self.critic = Critic(model_path, self.config.critic, self._engine, dtype)
        self.steps = 0

    def _engine(self, module: torch.nn.Module, lr: float | None = None) -> Any:
        """The engine that trains `module`: with one rank and a ZeRO stage that shards
        nothing with one rank (0-2), `SingleRankEngine` (a quarter faster a step on a GPU,
        measured); else DeepSpeed's, under `learner.zero_stage`."""
        cfg = self.config
        lr = cfg.lr if lr is None else lr
        if self.world_size == 1 and cfg.zero_stage < 3:
            return SingleRankEngine(
                module,
                lr=lr,
                weight_decay=cfg.weight_decay,
                grad_clip=cfg.grad_clip,
                device=_device(),
            )
        import deepspeed

        if self.world_size == 1 and torch.cuda.is_available():
            warnings.warn(
                "learner.zero_stage=3 with one rank shards nothing and took 3.8 times as long a "
                "step as a learner of one rank without it (0.5B model, H200, 4,096-token "
                "micro-batches); use it only to match a larger run's layout",
                stacklevel=3,
            )
        ds_config = self._deepspeed_config(self.bf16, lr)
        engine, *_ = deepspeed.initialize(
            model=module, config=ds_config, model_parameters=module.parameters()
        )
        return engine

    def _deepspeed_config(self, bf16: bool, lr: float) -> dict[str, Any]:
        return {
            "train_micro_batch_size_per_gpu": self.config.micro_batch_size,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": self.config.grad_clip,
            # torch's AdamW (its fused kernel on CUDA), not DeepSpeed's FusedAdam: that one is
            # compiled on first use, which takes a minute of both cores on a CPU machine and a
            # CUDA toolkit on a GPU one. On CPU DeepSpeed's is faster per step (an update of the
            # default model 8 ms against 5), which a step of ten seconds does not notice.
            "optimizer": {
                "type": "AdamW",
                "params": {
                    "lr": lr,
                    "weight_decay": self.config.weight_decay,
                    "torch_adam": True,
                    **({"fused": True} if torch.cuda.is_available() else {}),
                },
            },
            "zero_optimization": {"stage": self.config.zero_stage},
            "bf16": {"enabled": bf16},
            "steps_per_print": 2**31 - 1,
        }

    def step(self, batch: TrainBatch) -> dict[str, float]:
        """Learn from `batch` (`epochs` optimiser steps); returns metrics for logging. The
        batch may be on any device. With several ranks each is given the whole batch and
        learns from its share of the micro-batches one rank would take (`TrainBatch.shard`),
        each weighted as one rank weights it: N ranks take the step of one. Nothing in the
        micro-batch loop waits for the device: metrics are added up there and read once."""
        cfg = self.config
        width = int(batch.input_ids.shape[1])  # Dr. GRPO's constant normaliser
        plan = plan_micro_batches(
            batch,
            ranks=self.world_size,
            rank=self.rank,
            micro_batch_size=cfg.micro_batch_size,
            max_tokens=cfg.max_tokens_per_micro_batch,
            by_tokens=cfg.aggregation == "token-mean",
            device=self.engine.device,
        )
        if self.critic is not None:
            plan, value_targets = self.critic.prepare(plan)
        olds: list[torch.Tensor | None] = [None] * len(plan)
        if cfg.epochs > 1:
            # Later epochs clip against the policy the batch was first learned from.
            with torch.no_grad():
                olds = [packed_logprobs(self.engine.module, m.packed) for m in plan]
        totals: dict[str, torch.Tensor] = {}
        gap = GapMeter()  # `old` is the same in every epoch: measured in the first
        for epoch in range(cfg.epochs):
            for n, (micro, old) in enumerate(zip(plan, olds, strict=True)):
                # DeepSpeed reduces gradients and steps only at the boundary, which it must
                # know before the last micro-batch's backward pass.
                self.engine.set_gradient_accumulation_boundary(n == len(plan) - 1)
                metrics = self._accumulate(micro, old, width, gap if epoch == 0 else None)
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value * (micro.share / cfg.epochs)
            plain = self._plain_grad_norm() if epoch == cfg.epochs - 1 else 0.0
            self.engine.step()
        found = self.engine.get_global_grad_norm()
        read = torch.stack(list(totals.values())).tolist() if totals else []
        out = dict(zip(totals, all_reduce(read, self.engine.device), strict=True))
        out["grad_norm"] = float(found if found is not None else plain)
        if self.critic is not None:
            out.update(self.critic.fit(plan, value_targets, float(batch.loss_mask.sum())))
        gap.merge(lambda values, op: all_reduce(values, self.engine.device, op))
        out.update(gap.metrics())
        out["kl_coef"] = self.kl.value
        if "kl" in out:
            self.kl.update(out["kl"], len(batch))
        self.steps += 1
        return out

    def _plain_grad_norm(self) -> float:
        """The gradient norm DeepSpeed computes but does not keep at ZeRO-0 in fp32 (it clips
        with torch's `clip_grad_norm_` and drops the result); 0 elsewhere, where it keeps its own.
        The gradients are already reduced across ranks when the last backward pass returns."""
        if self.config.zero_stage != 0 or self.bf16:
            return 0.0
        norms = [p.grad.norm() for p in self.engine.module.parameters() if p.grad is not None]
        return float(torch.stack(norms).norm()) if norms else 0.0

    def _accumulate(
        self, micro: MicroBatch, old: torch.Tensor | None, width: int, gap: GapMeter | None
    ) -> dict[str, torch.Tensor]:
        """Forward and backward one micro-batch, its loss weighted by its share of the batch;
        `old` None means the current policy (the first epoch: the same values as the new
        logprobs, without gradient, and no second pass). `gap`, when given, measures the
        micro-batch's train/inference gap. The metrics stay on the device."""
        cfg = self.config
        chunk = micro.batch
        mask = chunk.loss_mask
        new = packed_logprobs(self.engine, micro.packed)
        old = new.detach() if old is None else old
        kl, advantages = self._reference_kl(micro, new)
        iw = importance_weights(
            old,
            chunk.rollout_logprobs,
            mask,
            cfg.importance_mode,
            cfg.importance_low,
            cfg.importance_high,
        )
        if gap is not None:
            versions = chunk.policy_versions
            current = None if versions is None else versions == self.steps
            gap.add(old, chunk.rollout_logprobs, mask, iw, current)
        out = policy_loss(
            new,
            old,
            advantages,
            mask,
            eps_low=cfg.eps_low,
            eps_high=cfg.eps_high,
            weights=iw.weights,
            aggregation=cfg.aggregation,
            max_tokens=width,
        )
        loss = out.loss
        metrics = {"clip_fraction": out.clip_fraction}
        if kl is not None:
            kl_mean = kl.sum() / mask.sum().clamp_min(1)
            if cfg.kl_mode == "loss":
                loss = loss + self.kl.value * kl_mean
            metrics["kl"] = kl_mean.detach()
        # DeepSpeed averages the ranks' gradients: times the ranks, they add up instead.
        self.engine.backward(loss * (micro.share * self.world_size))
        metrics["loss"] = loss.detach()
        return metrics

    def _reference_kl(
        self, micro: MicroBatch, new: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The per-token KL to the reference policy (None without one) and the advantages to
        train on: with `kl_mode="reward"`, each token's lowered by its own KL estimate, outside
        the gradient."""
        advantages = micro.batch.advantages
        if self.reference is None:
            return None, advantages
        cfg = self.config
        with torch.no_grad():
            ref = packed_logprobs(self.reference, micro.packed)
        kl = kl_divergence(new, ref, micro.batch.loss_mask, cfg.kl_estimator)
        if cfg.kl_mode == "reward":
            per_seq = advantages[:, None] if advantages.dim() == 1 else advantages
            advantages = per_seq - self.kl.value * kl.detach()
        return kl, advantages

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights on CPU, gathered from all ranks under ZeRO-3."""
        module = self.policy
        if self.config.zero_stage == 3:
            from deepspeed.runtime.zero import GatheredParameters

            with GatheredParameters(list(module.parameters())):
                return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    def save_checkpoint(self, directory: str | Path, tag: str) -> None:
        """Policy (and critic) weights, optimizer states and the KL weight in use under
        `directory/tag`, each rank writing its shards as DeepSpeed lays them out. Every rank
        calls it."""
        state = {"steps": self.steps, "kl_coef": self.kl.value}
        self.engine.save_checkpoint(str(directory), tag=tag, client_state=state)
        if self.critic is not None:
            self.critic.save_checkpoint(Path(directory) / tag)

    def save_model(self, directory: str | Path, about: dict[str, Any] | None = None) -> None:
        """The policy as a Hugging Face model directory: its weights (gathered under ZeRO-3)
        as safetensors, with the starting model's config and tokenizer, and `about` (which
        checkpoint it is) as `agenthub_checkpoint.json`. Written beside `directory` and then
        moved into place, so a crash leaves the previous one whole. Every rank calls it (they
        gather the weights together); rank 0 writes."""
        from transformers import AutoTokenizer

        if self.rank != 0:
            if self.config.zero_stage == 3:
                self.state_dict()  # the ranks gather the weights together
            return
        weights = self.state_dict()
        target = Path(directory)
        partial, old = (target.with_name(f"{target.name}.{end}") for end in ("partial", "old"))
        shutil.rmtree(partial, ignore_errors=True)
        self.policy.save_pretrained(partial, state_dict=weights, safe_serialization=True)
        AutoTokenizer.from_pretrained(self.model_path).save_pretrained(partial)
        if about is not None:
            (partial / MODEL_CHECKPOINT).write_text(json.dumps(about) + "\n", encoding="utf-8")
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        partial.rename(target)
        shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, directory: str | Path, tag: str | None = None) -> None:
        """Resume from `save_checkpoint`'s `directory/tag` (the latest tag when None), on as
        many ranks as saved it. Every rank calls it."""
        latest = Path(directory) / "latest"  # DeepSpeed's: the tag when none is given
        if tag is None and not latest.is_file():
            raise FileNotFoundError(f"no learner checkpoint in {directory}")
        tag = tag or latest.read_text(encoding="utf-8").strip()
        check_checkpoint_ranks(Path(directory) / tag, self.world_size)
        path, client = self.engine.load_checkpoint(str(directory), tag=tag)
        if path is None:
            raise FileNotFoundError(f"no learner checkpoint in {directory}")
        if self.critic is not None:
            self.critic.load_checkpoint(Path(directory) / tag)
        self.steps = int(client["steps"])
        if "kl_coef" in client:  # checkpoints before the adaptive KL weight kept none
            self.kl.value = float(client["kl_coef"])
