"""Packed token-budget micro-batches against padded ones, and chunked logprobs against the full
log-softmax, on the CPU (a CI-sized machine).

A random Qwen2-shaped model of 26M parameters (vocabulary 32,768) and 32 agent trajectories
whose lengths follow a lognormal (median ~250 tokens, clipped to 1,024, seed 0): the learner
(`Learner`, one rank, fp32: packed micro-batches of at most `--budget` tokens, logprobs of the
loss tokens through the output layer in chunks) against the same update written by hand in the
same process (`_learner_bench.HandLoop`: micro-batches of 8 sequences in the batch's order,
each padded to its longest, the full `log_softmax`), one warm-up and `--steps` timed steps
each; useful (non-padding) tokens/s of both. Then the peak memory of the logprobs of 4,096
tokens, forward and backward, through the full log-softmax and through `chunked_logprobs`
(1,024-token chunks), each measured in a fresh process (its peak resident memory over what it
held before). The last line is the packed learner's useful tokens/s over the padded loop's.

    python benchmarks/learner_packing.py [--steps 2] [--budget 2048]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from _learner_bench import (  # noqa: E402
    HandLoop,
    agent_sequences,
    build_model,
    collate,
    time_steps,
    useful_tokens,
)

VOCAB, HIDDEN, TOKENS, CHUNK = 32768, 384, 4096, 1024


def model_config() -> object:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=1024,
        num_hidden_layers=8,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )


def _high_water_kib() -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        return int(next(ln for ln in status if ln.startswith("VmHWM:")).split()[1])


def logprob_memory(kind: str) -> None:
    """In this process: MiB of peak resident memory that the logprobs of TOKENS tokens
    (forward and backward) add to what the process held before them."""
    from agenthub.trainer._logprobs import chunked_logprobs

    torch.manual_seed(0)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
    hidden = torch.randn(TOKENS, HIDDEN, requires_grad=True)
    targets = torch.randint(0, VOCAB, (TOKENS,))
    before = _high_water_kib()
    if kind == "full":
        logprobs = torch.log_softmax(head(hidden).float(), -1).gather(-1, targets[:, None])
    else:
        logprobs = chunked_logprobs(hidden, targets, head, CHUNK)
    logprobs.sum().backward()
    print((_high_water_kib() - before) / 1024)


def measure_memory(kind: str) -> float:
    done = subprocess.run(
        [sys.executable, __file__, "--logprob-memory", kind],
        capture_output=True,
        text=True,
        check=True,
        env={"OMP_NUM_THREADS": "1", "PATH": ""},
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2, help="timed steps after a warm-up")
    parser.add_argument("--budget", type=int, default=2048, help="learner tokens/micro-batch")
    parser.add_argument("--logprob-memory", choices=("full", "chunked"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.logprob_memory:
        logprob_memory(args.logprob_memory)
        return
    from agenthub.trainer import Learner, LearnerConfig

    seqs = agent_sequences(32, 250, 1024, VOCAB, prompt=64)
    with tempfile.TemporaryDirectory() as scratch:
        path = build_model(Path(scratch) / "model", model_config())
        hand = HandLoop(path, 8, "cpu", bf16=False)
        padded = time_steps(partial(hand.step, seqs), args.steps, "cpu")
        del hand
        settings = LearnerConfig(lr=1e-6, max_tokens_per_micro_batch=args.budget)
        learner = Learner(path, settings)
        packed = time_steps(partial(learner.step, collate(seqs)), args.steps, "cpu")
    tokens = useful_tokens(seqs)
    padded_rate, packed_rate = tokens / padded.seconds, tokens / packed.seconds
    print(f"padded (hand-written, 8 sequences a micro-batch): {padded_rate:,.0f} useful tokens/s")
    print(
        f"packed (learner, {args.budget} tokens a micro-batch): {packed_rate:,.0f} useful tokens/s"
    )
    full, chunked = measure_memory("full"), measure_memory("chunked")
    print(f"logprobs of {TOKENS} tokens: full {full:.0f} MiB, chunked {chunked:.0f} MiB")
    print(f"chunked / full logprob peak memory: {chunked / full:.2f}")
    print(f"packed / padded useful tokens/s: {packed_rate / padded_rate:.2f}")


if __name__ == "__main__":
    main()
