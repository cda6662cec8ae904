"""The scorers of `agenthub serve-rm --model`: rewards from a local transformers model, either a
sequence-classification model or a reward model saved in OpenRLHF's layout."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from agenthub._errors import AgentHubError
from agenthub.envs.reward_func import RewardOutput

_VALUE_HEAD = "value_head.weight"


def load_model_scorer(
    path: str, *, device: str = "cpu", max_length: int = 2048
) -> SequenceClassifierScorer | ValueHeadScorer:
    """The scorer of a model directory: a `ValueHeadScorer` when its checkpoint holds OpenRLHF's
    `value_head.weight`, else a `SequenceClassifierScorer`. Needs the `train` extra."""
    _torch_for(device)
    head = _value_head(Path(path))
    if head is None:
        return SequenceClassifierScorer(path, device=device, max_length=max_length)
    return ValueHeadScorer(path, head, device=device, max_length=max_length)


class SequenceClassifierScorer:
    """Rewards from a local transformers sequence-classification model: the first logit of
    each query. Needs the `train` extra."""

    kind = "sequence-classification model"

    def __init__(self, path: str, *, device: str = "cpu", max_length: int = 2048) -> None:
        self._torch = _torch_for(device)
        from transformers import AutoModelForSequenceClassification

        self.tokenizer, model = _load(path, AutoModelForSequenceClassification, self.kind)
        self.model = model.to(device).eval()
        if self.model.config.pad_token_id is None:  # without it, batches of 2+ are refused
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device = device
        self.max_length = max_length

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        if not queries:
            return RewardOutput(rewards=[])
        inputs = self.tokenizer(
            queries, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        if inputs["input_ids"].shape[1] == 0:
            _pad_to_one_token(inputs, self.tokenizer.pad_token_id)
        with self._torch.inference_mode():
            logits = self.model(**inputs.to(self.device)).logits
        return _finite(logits[:, 0].float().cpu().tolist())


class ValueHeadScorer:
    """Rewards from a reward model saved in OpenRLHF's layout: the base model's weights beside
    `value_head.weight`, a linear head of one output. Scored as OpenRLHF serves it: each query
    is made to end in the end-of-sequence token the model was trained to be read at, the head
    is read at each query's last token, and a model whose config says `normalize_reward` gives
    `(value - mean) / std` with the `mean` and `std` of its config. Needs the `train` extra."""

    kind = "OpenRLHF reward model"

    def __init__(
        self, path: str, head: Any, *, device: str = "cpu", max_length: int = 2048
    ) -> None:
        self._torch = _torch_for(device)
        from transformers import AutoModel

        self.tokenizer, base = _load(path, AutoModel, self.kind)
        config = base.config
        if tuple(head.shape) != (1, config.hidden_size):
            raise AgentHubError(
                f"{path}: {_VALUE_HEAD} has shape {tuple(head.shape)}; OpenRLHF's value head "
                f"is (1, {config.hidden_size}), one reward from each hidden state"
            )
        if self.tokenizer.eos_token is None:
            raise AgentHubError(
                f"{path}: the tokenizer names no eos token, the token OpenRLHF reads rewards at;"
                " set eos_token in tokenizer_config.json"
            )
        self.base = base.to(device).eval()
        self.head = head.to(device=device, dtype=self._torch.float32)
        normalized = getattr(config, "normalize_reward", False)  # keys OpenRLHF adds
        self.mean = float(getattr(config, "mean", 0.0)) if normalized else 0.0
        self.std = float(getattr(config, "std", 1.0)) if normalized else 1.0
        self.device = device
        self.max_length = max_length

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        if not queries:
            return RewardOutput(rewards=[])
        torch, eos = self._torch, self.tokenizer.eos_token
        texts = [_without_endings(q, (eos, self.tokenizer.pad_token)) + eos for q in queries]
        inputs = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        mask = inputs["attention_mask"]
        with torch.inference_mode():
            hidden = self.base(
                input_ids=inputs["input_ids"],
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0),  # the same on either padding side
            ).last_hidden_state
            last = mask.shape[1] - 1 - mask.flip(-1).argmax(-1)  # each query's last real token
            values = hidden[torch.arange(len(texts)), last].float() @ self.head.T
        return _finite(((values.squeeze(-1) - self.mean) / self.std).cpu().tolist())


def _value_head(path: Path) -> Any:
    """`value_head.weight` of the safetensors checkpoint in `path`, or None if it has none."""
    from safetensors import safe_open

    for file in sorted(path.glob("*.safetensors")):  # one file, or the shards of one
        with safe_open(str(file), framework="pt") as weights:
            if _VALUE_HEAD in weights.keys():  # noqa: SIM118 - safe_open has no `in`
                return weights.get_tensor(_VALUE_HEAD)
    return None


def _pad_to_one_token(inputs: Any, pad_token_id: int) -> None:
    """Give a batch of only empty queries (from a tokenizer adding no BOS token, no token at
    all) the one masked pad token each has when batched with a longer query: the model cannot
    run on no tokens, and a query must score the same alone as batched with others."""
    for name in list(inputs):
        inputs[name] = inputs[name].new_zeros((inputs[name].shape[0], 1))
    inputs["input_ids"].fill_(pad_token_id)


def _without_endings(text: str, endings: tuple[str | None, ...]) -> str:
    while ending := next((e for e in endings if e and text.endswith(e)), None):
        text = text[: -len(ending)]
    return text


def _torch_for(device: str) -> Any:
    """torch, once transformers imports and `device` is one torch can use here."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        raise AgentHubError(
            f"serving a model needs torch and transformers ({exc}); install agenthub[train]"
        ) from exc
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise AgentHubError(
            f"device {device!r} is not a torch one; use cpu, cuda or cuda:N"
        ) from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise AgentHubError(f"device {device!r}: torch sees no CUDA GPU here; use cpu")
    return torch


def _load(path: str, auto_model: Any, kind: str) -> tuple[Any, Any]:
    """The tokenizer (padding with its eos token if it names no pad token) and the model."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model, loading = auto_model.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError) as exc:  # transformers' word for a directory it cannot use
        reason = " ".join(str(exc).split())  # one line, as the CLI prints it
        raise AgentHubError(f"{path} holds no loadable {kind} and tokenizer: {reason}") from exc
    _refuse_random_weights(path, type(model).__name__, loading)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def _finite(rewards: list[float]) -> RewardOutput:
    if not all(math.isfinite(r) for r in rewards):
        raise AgentHubError(f"the model produced non-finite rewards: {rewards}")
    return RewardOutput(rewards=[float(r) for r in rewards])


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
        "trained as a reward model, or one in OpenRLHF's layout (value_head.weight, saved as "
        "safetensors)"
    )


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
