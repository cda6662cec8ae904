"""A learner of one and of two data-parallel ranks on this machine: tokens a second of a
learner step, and the memory each rank holds under ZeRO 0, 2 and 3.

Builds a random Qwen2 model of `--hidden` x `--layers` (the embedded default's vocabulary;
wider than the default so that compute, not overhead, fills a step), starts the learner's
ranks as a training run starts them (`LearnerGroup`: Ray actors in one placement group, gloo
between them), and times `--steps` steps of a batch of `--sequences` sequences of up to
`--tokens` tokens after one warm-up step, with 1 and with 2 ranks (ZeRO-2, each rank one torch
thread). Then, with 2 ranks under ZeRO 0, 2 and 3, the weight and optimizer memory each rank
holds between steps (its weights, or its partition of them under ZeRO-3; the master weights
its optimizer steps when they are not the model's own; the optimizer states), and its peak
resident memory over its start and steps, less what it had before its learner started. The
last line is ZeRO-3's weight+optimizer memory per rank over ZeRO-0's (ZeRO-3 shards both over
the 2 ranks; ZeRO-0 keeps all of them on each).

    python benchmarks/learner_scaling.py [--hidden 512] [--layers 8] [--steps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agenthub.trainer._workers import LearnerWorker  # noqa: E402


class MeasuredLearner(LearnerWorker):
    """A learner rank that also says how much memory it holds."""

    def _start(self) -> None:
        import deepspeed  # noqa: F401  (imported before the baseline: not the learner's memory)

        from agenthub.trainer._learner import Learner  # noqa: F401

        self.baseline_kb = _rss_kb()
        super()._start()

    def memory(self) -> dict[str, float]:
        """MiB of weights and of optimizer memory (the master weights it steps, when not the
        model's own, and its states) this rank holds between steps, and its peak resident
        memory over its life less what it had before its learner started."""
        import torch

        engine = self.learner.engine
        model = list(engine.module.parameters())
        # Under ZeRO-3 a weight holds only its rank's partition (`ds_tensor`).
        weights = sum(_bytes(getattr(p, "ds_tensor", p)) for p in model)
        inner = engine.optimizer
        while hasattr(inner, "optimizer"):  # DeepSpeed's ZeRO optimizers wrap torch's
            inner = inner.optimizer
        own = {id(p) for p in model}
        master = sum(_bytes(p) for g in inner.param_groups for p in g["params"] if id(p) not in own)
        states = sum(
            _bytes(t) for s in inner.state.values() for t in s.values() if torch.is_tensor(t)
        )
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {
            "weights_mib": weights / 2**20,
            "optimizer_mib": (master + states) / 2**20,
            "peak_mib": (peak_kb - self.baseline_kb) / 1024,
        }


def _bytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        line = next(ln for ln in status if ln.startswith("VmRSS:"))
    return int(line.split()[1])


def build_model(out: Path, hidden: int, layers: int) -> tuple[Path, int]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agenthub.agents.default_model._config import DefaultModelConfig

    config = Qwen2Config(
        vocab_size=DefaultModelConfig().vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        head_dim=64,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)
    return out, sum(p.numel() for p in model.parameters())


def batch(sequences: int, tokens: int) -> Any:
    import torch

    from agenthub.trainer import TrainBatch

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(tokens // 2, tokens + 1, (sequences,), generator=g).tolist()
    ids = [torch.randint(3, 4000, (n,), generator=g).tolist() for n in lengths]
    masks = [[0] * 8 + [1] * (n - 8) for n in lengths]
    logprobs = [[0.0] * 8 + (-torch.rand(n - 8, generator=g) * 4).tolist() for n in lengths]
    advantages = torch.randn(sequences, generator=g).tolist()
    return TrainBatch.collate(ids, masks, logprobs, advantages)


def settings(ranks: int, zero_stage: int, micro_batch_size: int) -> Any:
    from agenthub.trainer._config import TrainConfig

    learner = {"zero_stage": zero_stage, "lr": 1e-5, "micro_batch_size": micro_batch_size}
    return TrainConfig(env="math", learner=learner, ray={"learner_ranks": ranks})


async def run(
    model: Path, ranks: int, zero_stage: int, args: argparse.Namespace
) -> tuple[float, list[dict[str, float]]]:
    """Tokens a second over `args.steps` steps after a warm-up one, and each rank's memory."""
    from agenthub.trainer._learner_group import LearnerGroup

    work = batch(args.sequences, args.tokens)
    tokens = int(work.attention_mask.sum())
    group = LearnerGroup(settings(ranks, zero_stage, args.micro_batch_size), model, MeasuredLearner)
    try:
        await group.start()
        await group.step(work)
        started = time.perf_counter()
        for _ in range(args.steps):
            await group.step(work)
        seconds = time.perf_counter() - started
        memory = await asyncio.gather(*(a.memory.remote() for a in group.actors))
    finally:
        group.kill()
    return tokens * args.steps / seconds, list(memory)


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="agenthub-bench-") as scratch:
            model, params = build_model(Path(scratch) / "model", args.hidden, args.layers)
            print(f"model: {params / 1e6:.1f}M parameters, {params * 4 / 2**20:.0f} MiB in fp32")
            speed = {}
            for ranks in (1, 2):
                speed[ranks], _ = asyncio.run(run(model, ranks, 2, args))
                print(f"{ranks} rank(s), ZeRO-2: {speed[ranks]:.0f} tokens/s")
            print(f"speed-up, 2 ranks / 1: {speed[2] / speed[1]:.2f}")
            held = {}
            for stage in (0, 2, 3):
                _, memory = asyncio.run(run(model, 2, stage, args))
                held[stage] = max(m["weights_mib"] + m["optimizer_mib"] for m in memory)
                each = ", ".join(
                    f"rank {r}: weights {m['weights_mib']:.0f} MiB + optimizer "
                    f"{m['optimizer_mib']:.0f} MiB, peak +{m['peak_mib']:.0f} MiB"
                    for r, m in enumerate(memory)
                )
                print(f"2 ranks, ZeRO-{stage}: {each}")
    finally:
        ray.shutdown()
    ratio = held[3] / held[0]
    print(f"weight+optimizer memory per rank, ZeRO-3 / ZeRO-0 with 2 ranks: {ratio:.2f}")


if __name__ == "__main__":
    main()
