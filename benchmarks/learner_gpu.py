"""The learner on a GPU against the same update written by hand, on an agent-shaped batch.

Builds a random Qwen2.5-0.5B-shaped model (494M parameters, vocabulary 151,936, tied
embeddings; no download) and two batches of 64 trajectories: lengths from a lognormal (median
~1,000 tokens, clipped to 4,096, seed 0) with a prompt and alternating model and env turns,
and 64 x 1,024 (256 prompt + 768 response). On each it times the learner (`Learner`: packed
token-budget micro-batches, chunked logprobs, DeepSpeed bf16) and, in the same process, the
update written by hand (`_learner_bench.HandLoop`: padded micro-batches of 8 in the batch's
order, the full `log_softmax`, bf16 with fp32 master weights and fused AdamW), one warm-up and
`--steps` timed steps each. It prints useful (non-padding) tokens/s, MFU against a bf16
matmul it times itself, and peak GPU memory; first it checks the packed bf16 logprobs against
a padded forward pass. Results go to `--out` as JSON after every stage. The last line is the
learner's useful tokens/s over the hand-written loop's on the lognormal batch.

    python benchmarks/learner_gpu.py [--out DIR] [--budget 4096] [--zero 2] [--steps 3]
    python benchmarks/learner_gpu.py --tiny    # the same code on CPU, a small model, < 1 min
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from _learner_bench import (  # noqa: E402
    HandLoop,
    Sequences,
    Timing,
    agent_sequences,
    build_model,
    collate,
    equal_sequences,
    step_flops,
    time_steps,
    useful_tokens,
)


def model_config(tiny: bool) -> Any:
    from transformers import Qwen2Config

    if tiny:
        shape = {"vocab_size": 4096, "hidden_size": 128, "intermediate_size": 384}
        shape |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    else:  # Qwen2.5-0.5B
        shape = {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864}
        shape |= {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2}
    return Qwen2Config(
        **shape,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )


def matmul_tflops(device: str) -> float | None:
    """bf16 TFLOP/s of an 8192^3 matmul on `device` (None on CPU: no MFU there)."""
    if not device.startswith("cuda"):
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * 20 / (time.perf_counter() - started) / 1e12


def check_logprobs(path: Path, device: str, bf16: bool) -> float:
    """Largest |packed - padded| token logprob over 4 sequences (the learner's packed forward
    against a padded sdpa one of the same weights)."""
    from transformers import AutoModelForCausalLM

    from agenthub.trainer import token_logprobs
    from agenthub.trainer._batch import MicroBatch
    from agenthub.trainer._logprobs import PolicyModel, packed_logprobs

    dtype = torch.bfloat16 if bf16 else torch.float32
    padded = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    packed = PolicyModel(AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device), 1024)
    b = collate(agent_sequences(4, 300, 600, padded.config.vocab_size, seed=5))
    with torch.no_grad():
        micro = MicroBatch.of(b, device)
        got = packed_logprobs(packed, micro.packed)
        b = b.to(device)
        logits = padded(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        want = token_logprobs(logits, b.input_ids) * b.loss_mask
    return float((got - want).abs().max())


def run_learner(path: Path, seqs: Sequences, args: argparse.Namespace, **config: Any) -> Timing:
    from agenthub.trainer import Learner, LearnerConfig

    settings = {"zero_stage": args.zero, "max_tokens_per_micro_batch": args.budget}
    settings |= {"bf16": args.bf16, "lr": 1e-6} | config
    learner = Learner(path, LearnerConfig(**settings))
    batch = collate(seqs)
    timing = time_steps(partial(learner.step, batch), args.steps, args.device)
    del learner
    _free(args.device)
    return timing


def run_hand(path: Path, seqs: Sequences, args: argparse.Namespace) -> Timing:
    loop = HandLoop(path, args.micro, args.device, args.bf16)
    timing = time_steps(partial(loop.step, seqs), args.steps, args.device)
    del loop
    _free(args.device)
    return timing


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


class Report:
    """Prints each measurement as it comes and keeps them all in `out/learner_gpu.json`."""

    def __init__(self, out: Path, config: Any, peak: float | None) -> None:
        self.out, self.config, self.peak = out, config, peak
        self.rows: dict[str, Any] = {"matmul_tflops": peak}
        out.mkdir(parents=True, exist_ok=True)
        self._save()

    def add(self, name: str, seqs: Sequences, timing: Timing) -> float:
        rate = useful_tokens(seqs) / timing.seconds
        flops = step_flops(self.config, seqs) / timing.seconds / 1e12
        mfu = flops / self.peak if self.peak else None
        self.rows[name] = {
            "useful_tokens_per_s": rate,
            "step_s": timing.seconds,
            "tflops": flops,
            "mfu": mfu,
            "peak_gib": timing.peak_gib,
        }
        shown = f"MFU {mfu:.1%}" if mfu is not None else "(no MFU on CPU)"
        print(
            f"{name:<28} {rate:>9,.0f} useful tokens/s  {timing.seconds:6.2f} s/step  "
            f"{shown}  peak {timing.peak_gib:5.1f} GiB",
            flush=True,
        )
        self._save()
        return rate

    def note(self, key: str, value: Any) -> None:
        self.rows[key] = value
        self._save()

    def _save(self) -> None:
        text = json.dumps(self.rows, indent=2)
        (self.out / "learner_gpu.json").write_text(text + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a small model on the CPU")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after a warm-up")
    parser.add_argument("--budget", type=int, default=4096, help="learner tokens/micro-batch")
    parser.add_argument("--zero", type=int, default=2, choices=(0, 1, 2, 3), help="ZeRO stage")
    parser.add_argument("--micro", type=int, default=8, help="hand loop sequences/micro-batch")
    parser.add_argument("--sweep", action="store_true", help="also 2x and 4x budgets, ZeRO-3")
    parser.add_argument("--profile", action="store_true", help="profile one learner step")
    parser.add_argument("--out", type=Path, default=Path("runs/learner_gpu"))
    args = parser.parse_args()
    args.device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    args.bf16 = args.device == "cuda"
    config = model_config(args.tiny or args.device == "cpu")
    print(f"torch {torch.__version__}, device {args.device}", flush=True)
    if args.device == "cuda":
        print(f"GPU {torch.cuda.get_device_name()}", flush=True)
    report = Report(args.out, config, matmul_tflops(args.device))
    scale = 8 if config.vocab_size < 10000 else 1  # --tiny: shorter sequences, same shape
    agent = agent_sequences(64 // scale, 1000 // scale, 4096 // scale, config.vocab_size)
    equal = equal_sequences(64 // scale, 256 // scale, 768 // scale, config.vocab_size)
    if args.tiny:
        args.budget = max(args.budget // scale, 1)
    with tempfile.TemporaryDirectory() as scratch:
        path = build_model(Path(scratch) / "model", config)
        report.note("packed_vs_padded_max_abs", check_logprobs(path, args.device, args.bf16))
        print(
            f"packed vs padded logprobs: max |diff| {report.rows['packed_vs_padded_max_abs']:.3g}"
        )
        hand = report.add("hand, lognormal", agent, run_hand(path, agent, args))
        learner = report.add("learner, lognormal", agent, run_learner(path, agent, args))
        report.add("learner, lognormal, ckpt", agent, run_learner(path, agent, args, **_ckpt()))
        hand_eq = report.add("hand, 64x1024", equal, run_hand(path, equal, args))
        budget = {"max_tokens_per_micro_batch": args.budget * 2}  # 8 sequences of 1,024
        learner_eq = report.add("learner, 64x1024", equal, run_learner(path, equal, args, **budget))
        if args.profile:
            profile_step(path, agent, args)
        if args.sweep:
            for tokens in (args.budget * 2, args.budget * 4):
                report.add(
                    f"learner, lognormal, {tokens} tok",
                    agent,
                    run_learner(path, agent, args, max_tokens_per_micro_batch=tokens),
                )
            report.add(
                f"learner, lognormal, {args.budget * 4} tok, ckpt",
                agent,
                run_learner(
                    path, agent, args, max_tokens_per_micro_batch=args.budget * 4, **_ckpt()
                ),
            )
            report.add(
                "learner, lognormal, ZeRO-3", agent, run_learner(path, agent, args, zero_stage=3)
            )
    report.note("equal_ratio", learner_eq / hand_eq)
    print(f"learner / hand-written on 64 x 1,024: {learner_eq / hand_eq:.2f}")
    print(f"learner / hand-written useful tokens/s, lognormal agent batch: {learner / hand:.2f}")


def profile_step(path: Path, seqs: Sequences, args: argparse.Namespace) -> None:
    """One learner step under torch's profiler after a warm-up: the operators by their own
    device and host time, into `out/profile.txt`."""
    from torch.profiler import ProfilerActivity, profile

    from agenthub.trainer import Learner, LearnerConfig

    settings = {"zero_stage": args.zero, "max_tokens_per_micro_batch": args.budget}
    learner = Learner(path, LearnerConfig(**settings, bf16=args.bf16, lr=1e-6))
    batch = collate(seqs)
    learner.step(batch)
    activities = [ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        learner.step(batch)
        if args.device == "cuda":
            torch.cuda.synchronize()
    averages = prof.key_averages()
    tables = [averages.table(sort_by="self_cpu_time_total", row_limit=40)]
    if args.device == "cuda":
        tables.insert(0, averages.table(sort_by="self_cuda_time_total", row_limit=40))
    (args.out / "profile.txt").write_text("\n\n".join(tables), encoding="utf-8")
    del learner
    _free(args.device)


def _ckpt() -> dict[str, Any]:
    return {"gradient_checkpointing": True}


if __name__ == "__main__":
    main()
