"""Math verification throughput: the hard-killable worker pool vs the same check in-process.

Verifies the same corpus (procedural problems, half answered right and half wrong, each input
distinct so no cache helps) once in this process and once through `VerifierPool`, then runs
the hang corpus through the pool and counts verifications that did not come back within
their timeout plus a grace period. The last line is the throughput ratio (target >= 0.8).

One worker by default, so the ratio is the cost of the process boundary and the hard-kill
safety against the same single core in-process; `--workers N` shows what parallel workers add
on top.

    python benchmarks/verify_throughput.py [--tasks 1500] [--workers 1]
"""

from __future__ import annotations

import argparse
import time

from agenthub.envs.math import VerifierPool, generate_tasks
from agenthub.envs.math._check import check, quiet_math_verify

HANGS = [
    r"\boxed{9^{9^{9}}}",
    r"\boxed{10^{10^{10}}}",
    r"\boxed{(10^{10})!}",
    r"\boxed{9^{9^{9^{9}}}}",
    r"The answer is $2^{2^{2^{2^{2^{2}}}}}$",
]


def corpus(n: int) -> list[tuple[str, str]]:
    pairs = []
    for i, task in enumerate(generate_tasks("train", num_tasks=n, seed=7)):
        reference = str(task.metadata["reference"])
        if i % 2:
            reference = reference.replace(f"\\boxed{{{task.label}}}", f"\\boxed{{{i}.5}}")
        pairs.append((reference, str(task.label)))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--hang-timeout", type=float, default=2.0)
    args = parser.parse_args()
    quiet_math_verify()
    half = args.tasks // 2
    pairs = corpus(args.tasks * 2)
    inline_pairs, pool_pairs = pairs[: half * 2], pairs[half * 2 :]  # distinct inputs each

    start = time.perf_counter()
    inline = [check(r, g) for r, g in inline_pairs]
    inline_rate = len(inline_pairs) / (time.perf_counter() - start)

    with VerifierPool(args.workers) as pool:
        started = time.perf_counter()
        pool.verify("1", "1", timeout_s=60)
        print(f"pool start-up ({args.workers} workers): {time.perf_counter() - started:.2f} s")
        start = time.perf_counter()
        futures = [pool.submit(r, g, timeout_s=30) for r, g in pool_pairs]
        pooled = [f.result() for f in futures]
        pool_rate = len(pool_pairs) / (time.perf_counter() - start)

        hangs = 0
        for response in HANGS:
            began = time.perf_counter()
            verdict = pool.submit(response, "1", timeout_s=args.hang_timeout).result(
                timeout=args.hang_timeout + 30
            )
            took = time.perf_counter() - began
            hangs += verdict is not False or took > args.hang_timeout + 5
            print(f"hang input {response[:32]!r}: {verdict} in {took:.2f} s")
        print(f"pool timeouts {pool.timeouts}, workers replaced {pool.restarts}")

    assert sum(inline) == len(inline) // 2 and sum(pooled) == len(pooled) // 2, "wrong verdicts"
    print(f"in-process: {inline_rate:.1f} verifications/s ({len(inline_pairs)} inputs)")
    print(f"pool:       {pool_rate:.1f} verifications/s ({len(pool_pairs)} inputs)")
    print(f"hangs on the hang corpus: {hangs} of {len(HANGS)} (target 0)")
    print(f"throughput ratio pool/in-process: {pool_rate / inline_rate:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
