"""The scorer of `agenthub serve-rm --model`: rewards from a local transformers model."""

from __future__ import annotations

import math
from typing import Any

from agenthub._errors import AgentHubError
from agenthub.envs.reward_func import RewardOutput


class SequenceClassifierScorer:
    """Rewards from a local transformers sequence-classification model: the first logit of
    each query (the OpenRLHF reward-model convention). Needs the `train` extra."""

    def __init__(self, path: str, *, device: str = "cpu", max_length: int = 2048) -> None:
        try:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as exc:
            raise AgentHubError(
                f"serving a model needs torch and transformers ({exc}); install agenthub[train]"
            ) from exc
        self._torch = torch
        try:
            kind = torch.device(device).type
        except RuntimeError:
            raise AgentHubError(
                f"device {device!r} is not a torch one; use cpu, cuda or cuda:N"
            ) from None
        if kind == "cuda" and not torch.cuda.is_available():
            raise AgentHubError(f"device {device!r}: torch sees no CUDA GPU here; use cpu")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model, loading = AutoModelForSequenceClassification.from_pretrained(
                path, output_loading_info=True
            )
        except (OSError, ValueError) as exc:  # transformers' word for a directory it cannot use
            reason = " ".join(str(exc).split())  # one line, as the CLI prints it
            raise AgentHubError(
                f"{path} holds no loadable sequence-classification model and tokenizer: {reason}"
            ) from exc
        _refuse_random_weights(path, type(model).__name__, loading)
        self.model = model.to(device).eval()
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:  # without it, batches of 2+ are refused
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device = device
        self.max_length = max_length

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        if not queries:
            return RewardOutput(rewards=[])
        inputs = self.tokenizer(
            queries,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        ).to(self.device)
        with self._torch.inference_mode():
            logits = self.model(**inputs).logits
        rewards = [float(x) for x in logits[:, 0].float().cpu().tolist()]
        if not all(math.isfinite(r) for r in rewards):
            raise AgentHubError(f"the model produced non-finite rewards: {rewards}")
        return RewardOutput(rewards=rewards)


def _refuse_random_weights(path: str, model: str, loading: dict[str, Any]) -> None:
    """transformers starts the weights a checkpoint lacks at random and only warns: a head
    left so would serve random rewards without a word."""
    missing = sorted(loading["missing_keys"])
    if not missing:
        return
    unused = sorted(loading["unexpected_keys"])
    has = f" (it has {_few(unused)}, which {model} does not use)" if unused else ""
    raise AgentHubError(
        f"{path}: the checkpoint has no weights for {_few(missing)} of {model}{has}, so they "
        "would start random and so would the rewards; give a sequence-classification model "
        "trained as a reward model"
    )


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
