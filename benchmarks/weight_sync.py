"""Weight sync into a running vLLM engine: a state dict written to shared memory and reloaded
(`VLLMEngine.update_weights`, what training used before) against a broadcast through vLLM's
weight-transfer API (agenthub's gloo backend on CPU, what training uses now), same engine.

Builds a random Qwen2 model of `--hidden` x `--layers` (default about 150M parameters, 0.6 GB
in float32), starts one in-process engine with the `agenthub-gloo` transfer backend, opens the
group from this process as the trainer, then alternates the two ways of loading new weights
(ABBA) `--rounds` times each; after each round one generation checks the engine serves. The
state dict path starts from tensors already on the CPU (in training they first crossed Ray's
object store), so the baseline's figure is its best case. The last line is the state dict
path's seconds per sync divided by the broadcast's (above 1: the broadcast is faster).

    python benchmarks/weight_sync.py [--hidden 1024] [--layers 12] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_model(out: Path, hidden: int, layers: int) -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    sys.path.insert(0, str(REPO))
    from tests.tiny_model import build_tokenizer

    build_tokenizer(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        head_dim=64,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out, safe_serialization=True)
    return out


async def measure(model_dir: Path, rounds: int) -> tuple[list[float], list[float]]:
    import torch
    from transformers import AutoModelForCausalLM

    from agenthub.agents import SamplingParams, VLLMEngine
    from agenthub.agents._vllm_compat import trainer_weight_transfer
    from agenthub.agents._weight_transfer import BACKEND, GlooTrainerInitInfo, register
    from agenthub.trainer._weight_sync import EngineClient, LearnerSource, _free_port

    register()
    policy = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    params = sum(p.numel() for p in policy.parameters())
    print(f"model: {params / 1e6:.0f}M parameters, {params * 4 / 2**30:.2f} GiB in float32")
    engine = VLLMEngine(model_dir, max_model_len=256, weight_transfer=BACKEND)
    sampling = SamplingParams(max_tokens=4, temperature=1.0, seed=0)
    try:
        client = EngineClient(engine, asyncio.get_running_loop())
        info = GlooTrainerInitInfo(
            master_address="127.0.0.1", master_port=_free_port(), world_size=2, rank=0
        )
        sender = await asyncio.to_thread(
            trainer_weight_transfer,
            info,
            client=client,
            source=LearnerSource(policy, zero3=False),
        )
        state_dict_s: list[float] = []
        broadcast_s: list[float] = []
        version = 0
        for order in ["AB", "BA"] * ((rounds + 1) // 2):
            for way in order:
                version += 1
                with torch.no_grad():
                    for p in policy.parameters():
                        p.mul_(0.999)
                started = time.perf_counter()
                if way == "A":
                    await engine.update_weights(policy.state_dict(), version)
                else:
                    client.version = version
                    await asyncio.to_thread(sender.send_weights)
                took = time.perf_counter() - started
                (state_dict_s if way == "A" else broadcast_s).append(took)
                served = await engine.generate([5, 17, 40], sampling)
                assert served.policy_version == version
                print(f"  {'state dict' if way == 'A' else 'broadcast'}: {took:.3f} s")
        sender.shutdown()
        return state_dict_s, broadcast_s
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agenthub-bench-") as scratch:
        model_dir = build_model(Path(scratch), args.hidden, args.layers)
        state_dict_s, broadcast_s = asyncio.run(measure(model_dir, args.rounds))
    a, b = statistics.median(state_dict_s), statistics.median(broadcast_s)
    print(f"state dict to shared memory + reload: {a:.3f} s a sync (median of {len(state_dict_s)})")
    print(f"broadcast, weight-transfer API: {b:.3f} s a sync (median of {len(broadcast_s)})")
    print(f"weight sync speed-up, broadcast vs state dict reload: {a / b:.2f}")


if __name__ == "__main__":
    main()
