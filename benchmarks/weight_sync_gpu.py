"""Weight sync of a 0.5B model into a running vLLM engine on a GPU: today's CPU copy against
the GPU-to-GPU paths (`agenthub/trainer/_gpu_transfer.py`).

Builds a random Qwen2.5-0.5B-shaped model (494M parameters, vocabulary 151,936, tied
embeddings, bf16; no download) as the learner's policy on `cuda:0`, and measures, `--rounds`
times each in alternation, one sync of its weights into an engine:

- today: the state dict copied to host memory and loaded by the engine from shared memory
  (`VLLMEngine.update_weights`, the path a learner without a GPU transfer takes);
- ipc: CUDA IPC handles of the learner's GPU tensors, bucket by bucket (`IpcSender`), into an
  engine on the same GPU (`ray.colocate`);
- nccl: where a second GPU exists, a packed NCCL broadcast (`NcclSender`) into an engine on
  `cuda:1`.

Every sync is followed by one generation that must be served under the new policy version.
It prints seconds per sync (median) and GiB/s for each path, writes them to `--out` as JSON
after each path, and prints last the IPC path's seconds per sync over today's (below 1: IPC
is faster). On a machine without CUDA it says so and exits with status 1.

    VLLM_USE_FLASHINFER_SAMPLER=0 python benchmarks/weight_sync_gpu.py [--rounds 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def require_cuda() -> int:
    """The number of GPUs; exits with a clear message where there is none."""
    import torch

    if not torch.cuda.is_available():
        sys.exit(
            "weight_sync_gpu.py measures GPU-to-GPU weight sync and needs a CUDA GPU, which "
            "this machine lacks (torch.cuda.is_available() is False); run it on a GPU machine, "
            "or benchmarks/weight_sync.py for the CPU path"
        )
    return int(torch.cuda.device_count())


def build_model(out: Path) -> tuple[Path, Any]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.tiny_model import QWEN25_05B_BODY, build_tokenizer

    build_tokenizer(out)
    config = Qwen2Config(
        vocab_size=151936,
        **QWEN25_05B_BODY,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return out, model.to("cuda:0")


def nbytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


async def start_engine(model_dir: Path, backend: str, gpu: int) -> Any:
    from agenthub.agents import VLLMEngine

    # The engine core is a child process: it sees the GPU named here as its cuda:0.
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    try:
        return VLLMEngine(
            model_dir,
            max_model_len=512,
            weight_transfer=backend,
            dtype="bfloat16",
            gpu_memory_utilization=0.35,
            enforce_eager=True,
        )
    finally:
        if saved is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


async def time_path(name: str, engine: Any, sync: Any, policy: Any, rounds: int) -> list[float]:
    import torch

    from agenthub.agents import SamplingParams

    sampling = SamplingParams(max_tokens=4, temperature=0.0)
    took: list[float] = []
    for _ in range(rounds + 1):  # the first is a warm-up
        with torch.no_grad():
            for p in policy.parameters():
                p.mul_(0.999)
        torch.cuda.synchronize()
        version = engine.policy_version + 1
        started = time.perf_counter()
        await sync(version)
        took.append(time.perf_counter() - started)
        served = await engine.generate([5, 17, 40], sampling)
        assert served.policy_version == version, (served.policy_version, version)
        print(f"  {name}: {took[-1]:.3f} s", flush=True)
    return took[1:]


async def measure(
    model_dir: Path, policy: Any, gpus: int, rounds: int, out: Path
) -> dict[str, Any]:
    from agenthub.trainer._gpu_transfer import IpcSender, NcclSender
    from agenthub.trainer._weight_sync import EngineClient, LearnerSource, _free_port

    results: dict[str, Any] = {"bytes": nbytes(policy), "gpus": gpus}
    loop = asyncio.get_running_loop()
    engine = await start_engine(model_dir, "ipc", 0)
    try:
        client = EngineClient(engine, loop)
        ipc = await asyncio.to_thread(IpcSender.open, client, LearnerSource(policy, zero3=False))

        async def today(version: int) -> None:
            weights = {k: v.detach().to("cpu") for k, v in policy.state_dict().items()}
            await engine.update_weights(weights, version)

        async def by_ipc(version: int) -> None:
            client.version = version
            await asyncio.to_thread(ipc.send_weights)

        for name, sync in (("today", today), ("ipc", by_ipc), ("today", today), ("ipc", by_ipc)):
            results.setdefault(name, []).extend(
                await time_path(name, engine, sync, policy, max(1, rounds // 2))
            )
            (out / "weight_sync_gpu.json").write_text(json.dumps(results, indent=1))
    finally:
        await engine.aclose()
    if gpus >= 2:
        engine = await start_engine(model_dir, "nccl", 1)
        try:
            client = EngineClient(engine, loop)
            rendezvous = {"master_address": "127.0.0.1", "master_port": _free_port()}
            rendezvous["world_size"] = 2
            source = LearnerSource(policy, zero3=False)
            nccl = await asyncio.to_thread(NcclSender.open, client, source, rendezvous)

            async def by_nccl(version: int) -> None:
                client.version = version
                await asyncio.to_thread(nccl.send_weights)

            results["nccl"] = await time_path("nccl", engine, by_nccl, policy, rounds)
            (out / "weight_sync_gpu.json").write_text(json.dumps(results, indent=1))
        finally:
            await engine.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    gpus = require_cuda()
    import torch
    import vllm

    print(
        f"torch {torch.__version__}, vLLM {vllm.__version__}, {gpus} GPU(s): "
        f"{torch.cuda.get_device_name(0)}",
        flush=True,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agenthub-bench-") as scratch:
        model_dir, policy = build_model(Path(scratch))
        results = asyncio.run(measure(model_dir, policy, gpus, args.rounds, args.out))
    gib = results["bytes"] / 2**30
    print(f"model: {gib:.2f} GiB of bf16 weights")
    medians = {}
    for name in ("today", "ipc", "nccl"):
        if name in results:
            medians[name] = statistics.median(results[name])
            print(
                f"{name}: {medians[name]:.3f} s a sync, {gib / medians[name]:.2f} GiB/s "
                f"(median of {len(results[name])})"
            )
    print(f"ipc / today, seconds per sync: {medians['ipc'] / medians['today']:.3f}")


if __name__ == "__main__":
    main()
