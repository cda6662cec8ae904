"""The train/inference gap against staleness: how far the DeepSpeed learner's logprobs of a
batch lie from the vLLM engine's that sampled it, when the learner is k policy versions ahead.

The embedded default model (fp32 on CPU, in both): the engine samples 2 replies of up to 32
tokens to each of 12 questions at policy version 0; a fresh learner steps on that batch (lr
2e-4, advantages +1/-1) again and again, and the step it takes at k versions ahead reports
`gap/mean` and `gap/max` over the batch's model tokens (all of them current at k = 0, stale
after). The last line is the mean gap at the largest k divided by that at k = 0.

    python benchmarks/train_inference_gap.py [--staleness 0 1 2 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2, 4])
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from agenthub.agents.default_model import ensure_default_model
    from tests.integration.trainer.gap_probe import gaps_by_staleness

    ks = sorted(set(args.staleness))
    gaps = gaps_by_staleness(ensure_default_model(), ks)
    print(f"{'k':>3} {'gap/mean':>10} {'gap/max':>10} {'is_clipped':>10}")
    for k in ks:
        m = gaps[k]
        print(f"{k:>3} {m['gap/mean']:>10.2e} {m['gap/max']:>10.2e} {m['is_clipped']:>10.3f}")
    ratio = gaps[ks[-1]]["gap/mean"] / gaps[ks[0]]["gap/mean"]
    print(f"mean gap at k={ks[-1]} / k={ks[0]}: {ratio:.1f}")


if __name__ == "__main__":
    main()
