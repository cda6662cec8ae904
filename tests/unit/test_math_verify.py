"""`agenthub.envs.math.verify`: extraction, equivalence, hedging and hanging inputs."""

from __future__ import annotations

import time

import pytest

from agenthub.envs.math import VerifierPool, extract_answers, verify

EQUIVALENT = [
    (r"So the result is \boxed{\frac{1}{2}}.", "0.5"),
    (r"\boxed{1/2}", r"\frac12"),
    (r"\boxed{0.50}", r"\frac{1}{2}"),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"),
    (r"\boxed{\frac{\sqrt{3}}{3}}", r"\frac{1}{\sqrt{3}}"),
    (r"\boxed{x^2+2x+1}", "(x+1)^2"),
    (r"\boxed{\{3, 1, 2\}}", r"\{1,2,3\}"),
    (r"\boxed{(1, 2]}", "(1,2]"),
    (r"\boxed{[-\infty, 3)}", r"[-\infty,3)"),
    (r"\boxed{(1, 2)}", "(1,2)"),
    (r"\boxed{-\frac{7}{12}}", r"-\frac{7}{12}"),
    (r"\boxed{\boxed{5}}", "5"),
    (r"\boxed{\frac{a}{b+\frac{1}{2}}}", r"\frac{2a}{2b+1}"),
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),
    ("#### 1,234,567", "1234567"),
    ("#### $1,200", "1200"),
    ("The answer is 3.5.", r"\frac{7}{2}"),
    ("so the answer is: $\\frac{3}{4}$\nDone", "0.75"),
    ("First 12, then 13", "13"),
    ("we get 7/8", "0.875"),
    (r"\boxed{0.5} which is \boxed{\frac{1}{2}}", "1/2"),  # repeating one answer is no hedge
    (r"\boxed{50\%}", r"50\%"),
    (r"\boxed{50\%}", "0.5"),  # a percent sign means hundredths
    (r"\boxed{50}", r"50\%"),  # the gold asks for a percentage: the bare count is fine
    (r"\boxed{0.5}", r"50\%"),
    ("The answer is 50%.", "0.5"),
    (r"\boxed{x = 3}", "3"),
    (r"\boxed{1,000}", "1000"),
]

NOT_EQUIVALENT = [
    (r"\boxed{0.333}", r"\frac13"),
    (r"\boxed{[1,2)}", "[1,2]"),  # bracket types matter
    (r"\boxed{(1,2)}", "(2,1)"),  # tuples are ordered
    (r"\boxed{\pi}", "3.14159"),
    (r"\boxed{3} or maybe \boxed{5}", "5"),  # hedging is not rewarded
    (r"\boxed{5} \boxed{3} \boxed{5}", "5"),
    (r"\boxed{50\%}", "50"),  # 50% is one half, not fifty
    (r"\boxed{0.5\%}", "0.5"),
    (r"\boxed{2x}", "2y"),
    (r"\boxed{}", "0"),
    ("", "1"),
    ("I do not know.", "1"),
    (r"\boxed{", "1"),
    ("#### 71", "72"),
]


@pytest.fixture(scope="module")
def pool() -> VerifierPool:  # type: ignore[misc]
    with VerifierPool(2) as p:
        yield p


@pytest.mark.parametrize(("response", "gold"), EQUIVALENT)
def test_equivalent_answers_are_accepted(pool: VerifierPool, response: str, gold: str) -> None:
    assert pool.verify(response, gold, timeout_s=20) is True


@pytest.mark.parametrize(("response", "gold"), NOT_EQUIVALENT)
def test_different_answers_are_rejected(pool: VerifierPool, response: str, gold: str) -> None:
    assert pool.verify(response, gold, timeout_s=20) is False


def test_extraction_takes_the_last_boxed_with_nested_braces() -> None:
    assert extract_answers(r"\boxed{1} then \boxed{\frac{1}{\sqrt{2}}} end") == [
        "1",
        r"\frac{1}{\sqrt{2}}",
    ]
    assert extract_answers("#### 12,000 apples") == ["12000"]
    assert extract_answers("nothing here") == []


HANGS = [r"\boxed{9^{9^{9}}}", r"\boxed{10^{10^{10}}}", r"\boxed{(10^{10})!}", "9**9**9**9"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("response", HANGS)
def test_hanging_inputs_are_wrong_within_the_timeout(pool: VerifierPool, response: str) -> None:
    pool.verify("warm up", "1", timeout_s=60)  # worker start-up is not part of the timeout
    start = time.monotonic()
    assert pool.verify(response, "1", timeout_s=1.0) is False
    # The hang itself is endless: any bound far from it shows the timeout cut it, and a
    # loaded machine may take seconds to kill and replace the worker.
    assert time.monotonic() - start < 1.0 + 30.0


def test_the_public_verify_uses_the_shared_pool() -> None:
    assert verify(r"\boxed{4}", "4", timeout_s=60) is True
