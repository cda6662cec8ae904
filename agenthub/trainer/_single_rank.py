"""The learner's engine when it has one rank: the update a hand-written loop makes, with the
part of DeepSpeed's engine interface the learner uses.

Measured on an H200 (`benchmarks/learner_gpu.py --profile`): with one rank, DeepSpeed's ZeRO
engines spent about a quarter of a 0.5B model's step in the host work of their per-parameter
gradient hooks (bucket copies and scaling after every micro-batch's backward pass), which a
rank with nobody to reduce with does not need, and ZeRO stages 0, 1 and 2 were no faster than
one another. Here autograd accumulates the micro-batches' gradients in the weights' own dtype
(as a hand-written loop does), and at the step they become the fp32 master weights' gradients,
are clipped to `grad_clip` by their global norm, and torch's AdamW (fused on CUDA) steps the
master weights, which are copied back. In fp32 the weights are their own master weights.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

__all__ = ["SINGLE_RANK_STATE", "SingleRankEngine"]

SINGLE_RANK_STATE = "agenthub_single_rank.pt"
"""In a checkpoint tag's folder: the weights, master weights and optimizer of one rank."""
_DEEPSPEED_STATE = "mp_rank_00_model_states.pt"


class SingleRankEngine:
    """`module` trained on `device` by AdamW with fp32 master weights; the methods and
    attributes of DeepSpeed's engine that the learner and the critic call."""

    def __init__(
        self,
        module: torch.nn.Module,
        *,
        lr: float,
        weight_decay: float,
        grad_clip: float,
        device: torch.device,
    ) -> None:
        self.module = module.to(device)
        self.device = device
        self.grad_clip = grad_clip
        self.params: list[torch.Tensor] = [p for p in module.parameters() if p.requires_grad]
        self.bf16 = any(p.dtype != torch.float32 for p in self.params)
        if self.bf16:
            self.master = [p.detach().float().clone() for p in self.params]
        else:
            self.master = self.params
        fused = True if device.type == "cuda" else None  # None: torch's default for the device
        self.optimizer = torch.optim.AdamW(
            self.master, lr=lr, weight_decay=weight_decay, fused=fused
        )
        self._norm: torch.Tensor | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def backward(self, loss: torch.Tensor) -> None:
        torch.autograd.backward(loss)

    def set_gradient_accumulation_boundary(self, boundary: bool) -> None:
        """Nothing to do: gradients add up in the weights until `step`."""

    def step(self) -> None:
        """Clip the accumulated gradients by their global norm and step the optimizer."""
        if self.bf16:
            for master, p in zip(self.master, self.params, strict=True):
                master.grad = torch.zeros_like(master) if p.grad is None else p.grad.float()
                p.grad = None
        self._norm = torch.nn.utils.clip_grad_norm_(self.master, self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.bf16:
            with torch.no_grad():
                torch._foreach_copy_(self.params, self.master)

    def get_global_grad_norm(self) -> float | None:
        """The last step's gradient norm before clipping (None before the first step)."""
        return None if self._norm is None else float(self._norm)

    def save_checkpoint(
        self, directory: str, tag: str, client_state: dict[str, Any] | None = None
    ) -> None:
        """`directory/tag/agenthub_single_rank.pt` and `directory/latest` naming the tag, as
        DeepSpeed lays out its checkpoints."""
        folder = Path(directory) / tag
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "module": self.module.state_dict(),
            "master": [m.detach().cpu() for m in self.master] if self.bf16 else None,
            "optimizer": self.optimizer.state_dict(),
            "client": client_state or {},
        }
        partial = folder / f"{SINGLE_RANK_STATE}.partial"
        torch.save(state, partial)
        partial.replace(folder / SINGLE_RANK_STATE)
        (Path(directory) / "latest").write_text(tag, encoding="utf-8")

    def load_checkpoint(self, directory: str, tag: str) -> tuple[str | None, dict[str, Any]]:
        """`save_checkpoint`'s state of `directory/tag`: (its path, its client state), or
        (None, {}) when there is none. A checkpoint DeepSpeed wrote for one rank (agenthub
        before this engine) gives its weights and client state; the optimizer starts anew."""
        path = Path(directory) / tag / SINGLE_RANK_STATE
        legacy = Path(directory) / tag / _DEEPSPEED_STATE
        if not path.is_file():
            return (None, {}) if not legacy.is_file() else self._load_deepspeed(legacy)
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.module.load_state_dict(state["module"])
        if self.bf16:
            with torch.no_grad():
                for master, saved in zip(self.master, state["master"], strict=True):
                    master.copy_(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        return str(path), dict(state["client"])

    def _load_deepspeed(self, path: Path) -> tuple[str, dict[str, Any]]:
        # DeepSpeed's own file (not only tensors): written by this learner's earlier version.
        state = torch.load(path, map_location=self.device, weights_only=False)
        self.module.load_state_dict(state["module"])
        if self.bf16:
            with torch.no_grad():
                torch._foreach_copy_(self.master, [p.float() for p in self.params])
        warnings.warn(
            f"{path} was written by DeepSpeed's engine, which a learner of one rank no longer "
            "uses: its weights and step are restored, its optimizer moments start anew",
            stacklevel=3,
        )
        return str(path), {k: state[k] for k in ("steps", "kl_coef") if k in state}
