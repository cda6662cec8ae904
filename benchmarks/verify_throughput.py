"""Math verification throughput: the hard-killable worker pool vs the same check in-process.

Verifies the same corpus (procedural problems, half answered right and half wrong, each input
distinct so no cache helps) once in this process and once through `VerifierPool`, then runs
the hang corpus through the pool and counts verifications that did not come back within
their timeout plus a grace period. The last line is the throughput ratio (target >= 0.8).

The pool runs twice: with one worker (the per-core cost of the process boundary and the
hard-kill safety, printed as its own ratio) and with the pool's default of one worker per core,
which is what `verify` uses and what the last line compares with the in-process call.

    python benchmarks/verify_throughput.py [--tasks 1500] [--workers N]
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


def pooled(workers: int | None, pairs: list[tuple[str, str]]) -> tuple[float, list[bool]]:
    """Verifications per second through a fresh pool (`workers` None: the pool's default),
    and the verdicts."""
    with VerifierPool(workers) as pool:
        started = time.perf_counter()
        pool.verify("1", "1", timeout_s=60)
        took = time.perf_counter() - started
        print(f"pool start-up ({pool.num_workers} workers): {took:.2f} s")
        start = time.perf_counter()
        futures = [pool.submit(r, g, timeout_s=30) for r, g in pairs]
        verdicts = [f.result() for f in futures]
        return len(pairs) / (time.perf_counter() - start), verdicts


def hang_count(hang_timeout: float) -> int:
    """Hang inputs that did not come back False within their timeout plus a grace period."""
    hangs = 0
    with VerifierPool(1) as pool:
        for response in HANGS:
            began = time.perf_counter()
            verdict = pool.submit(response, "1", timeout_s=hang_timeout).result(
                timeout=hang_timeout + 30
            )
            took = time.perf_counter() - began
            hangs += verdict is not False or took > hang_timeout + 5
            print(f"hang input {response[:32]!r}: {verdict} in {took:.2f} s")
        print(f"pool timeouts {pool.timeouts}, workers replaced {pool.restarts}")
    return hangs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=None, help="default: the pool's own")
    parser.add_argument("--hang-timeout", type=float, default=2.0)
    args = parser.parse_args()
    quiet_math_verify()
    # Distinct inputs for each run (same generator, half right and half wrong): pool workers
    # forked after the in-process run must not find its answers in inherited caches.
    pairs = corpus(args.tasks * 3)
    n = len(pairs) // 3
    inline_pairs, single_pairs, multi_pairs = pairs[:n], pairs[n : 2 * n], pairs[2 * n : 3 * n]

    start = time.perf_counter()
    inline = [check(r, g) for r, g in inline_pairs]
    inline_rate = len(inline_pairs) / (time.perf_counter() - start)
    single_rate, single = pooled(1, single_pairs)
    multi_rate, multi = pooled(args.workers, multi_pairs)
    hangs = hang_count(args.hang_timeout)

    for verdicts in (inline, single, multi):
        assert sum(verdicts) == len(verdicts) // 2, "wrong verdicts"
    print(f"in-process:            {inline_rate:.1f} verifications/s ({n} inputs)")
    single_ratio = single_rate / inline_rate
    print(f"pool, 1 worker:        {single_rate:.1f} verifications/s (ratio {single_ratio:.2f})")
    print(f"pool, default workers: {multi_rate:.1f} verifications/s")
    print(f"hangs on the hang corpus: {hangs} of {len(HANGS)} (target 0)")
    print(
        f"throughput ratio pool ({args.workers or 'default'} workers)/in-process: "
        f"{multi_rate / inline_rate:.2f} (target >= 0.8)"
    )


if __name__ == "__main__":
    main()
