"""`agenthub view` in a real headless browser (Debian's chromium and its driver) over run
directories of a real `agenthub eval` on the embedded default model and a training run's files.

Screenshots of the main pages are saved under the test's temporary directory; the path is
printed (pytest -s shows it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthub.agents import EpisodeError, Timings, Trajectory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def run_eval(out: Path, *extra: str) -> None:
    command = [
        sys.executable,
        "-m",
        "agenthub",
        "eval",
        "--env",
        "math",
        "--split",
        "held_out",
        "-n",
        "3",
        "-k",
        "2",
        "--max-turns",
        "2",
        "--max-reply-tokens",
        "32",
        *extra,
        "--out",
        str(out),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def eval_runs(
    tmp_path_factory: pytest.TempPathFactory, vllm_server: str, default_model: Path
) -> list[Path]:
    """Two evals of the same tasks: greedy, and sampled under another seed (on the session's
    `vllm serve` of the default model: what the page shows does not depend on the engine)."""
    root = tmp_path_factory.mktemp("view-evals")
    served = ("--base-url", vllm_server, "--model", str(default_model))
    run_eval(root / "greedy", "--temperature", "0", *served)
    run_eval(root / "sampled", "--temperature", "1", "--seed", "1", *served)
    return [root / "greedy", root / "sampled"]


@pytest.fixture(scope="module")
def train_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training run's files as the trainer writes them: config, metrics by step, samples."""
    run = tmp_path_factory.mktemp("view-train") / "train"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "math", "model": "default"}))
    with (run / "metrics.jsonl").open("w") as metrics:
        for step in range(1, 21):
            record = {
                "step": step,
                "train/reward": step / 20,
                "rollout/staleness_mean": 0.5,
                "learner/loss": 1 / step,
            }
            if step % 5 == 0:
                record["eval/reward"] = step / 25
            metrics.write(json.dumps(record) + "\n")
    with (run / "trajectories.jsonl").open("w") as samples:
        for step in range(1, 21):
            failed = step == 7
            samples.write(
                Trajectory(
                    env="math",
                    task_id=f"task-{step % 3}",
                    tokens=[1, 2, 3, 4, 5],
                    loss_mask=[0, 0, 1, 1, 1],
                    logprobs=[0.0, 0.0, -0.1, -0.2, -0.3],
                    policy_versions=[step] * 5,
                    step_rewards=[0.0 if failed else 1.0],
                    reward=0.0 if failed else 1.0,
                    terminated=not failed,
                    truncated=False,
                    num_turns=1,
                    error=EpisodeError(cause="env_error", message="boom") if failed else None,
                    timings=Timings(total_s=0.1),
                ).model_dump_json()
                + "\n"
            )
    return run


@pytest.fixture(scope="module")
def view_url(eval_runs: list[Path], train_run: Path) -> Iterator[str]:
    """`agenthub view` over the three runs, on a free port."""
    command = [sys.executable, "-m", "agenthub", "view", *map(str, eval_runs), str(train_run)]
    with subprocess.Popen(
        [*command, "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as server:
        assert server.stdout is not None
        said = [server.stdout.readline()]
        while not (found := re.search(r"http://127\.0\.0\.1:\d+/", said[-1])) and said[-1]:
            said.append(server.stdout.readline())
        assert found, "".join(said)
        try:
            yield found.group()
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("view-screenshots")
    print(f"\nscreenshots of agenthub view: {folder}")
    return folder


def open_page(browser: Any, url: str) -> None:
    """Load `url` and wait until the page has drawn it (the app marks `body[data-ready]`)."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    hash_ = "#" + url.split("#", 1)[1] if "#" in url else ""
    WebDriverWait(browser, 90).until(
        lambda b: b.execute_script("return document.body.dataset.ready") == hash_
    )
    assert not browser.find_elements("css selector", "main > .error"), browser.page_source[:2000]


def lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]


def test_the_runs_page_shows_every_run_and_its_summary(
    browser: Any, view_url: str, eval_runs: list[Path], shots: Path
) -> None:
    open_page(browser, view_url + "#/")
    cards = browser.find_elements("css selector", ".card.run")
    assert [c.find_element("css selector", ".run-name").text for c in cards] == [
        "greedy",
        "sampled",
        "train",
    ]
    summary = json.loads((eval_runs[0] / "summary.json").read_text())
    facts = cards[0].find_element("css selector", "td[data-key='episodes']").text
    assert facts == str(summary["episodes"]) == "6"
    assert cards[0].find_element("css selector", "td[data-key='env']").text == "math"
    assert "steps logged" in cards[2].text and "20" in cards[2].text
    browser.save_screenshot(str(shots / "runs.png"))


def test_curves_draw_data_points_of_several_runs(browser: Any, view_url: str, shots: Path) -> None:
    open_page(browser, view_url + "#/curves?runs=0,1,2&keys=episode/reward,train/reward")
    charts = browser.find_elements("css selector", ".chart")
    assert [c.get_attribute("data-key") for c in charts] == ["episode/reward", "train/reward"]
    traces = browser.execute_script(
        "return [...document.querySelectorAll('.chart')].map("
        "c => c.data.map(t => [t.name, t.x.length]))"
    )
    assert traces == [[["greedy", 6], ["sampled", 6], ["train", 20]], [["train", 20]]]
    points = charts[1].find_elements("css selector", ".scatterlayer path.point")
    assert len(points) == 20
    browser.save_screenshot(str(shots / "curves.png"))


def test_the_episode_table_counts_what_summary_json_counts(
    browser: Any, view_url: str, eval_runs: list[Path], shots: Path
) -> None:
    for run_id, run in enumerate(eval_runs):
        summary = json.loads((run / "summary.json").read_text())
        open_page(browser, view_url + f"#/episodes/{run_id}")
        counts = browser.find_element("id", "counts").text
        n = summary["episodes"]
        assert counts == f"{n} matching of {n} episodes"
        rows = browser.find_elements("css selector", "#episodes tbody tr")
        assert len(rows) == n
        tasks = {r.find_elements("css selector", "td")[1].text for r in rows}
        assert len(tasks) == summary["tasks"]
        open_page(browser, view_url + f"#/episodes/{run_id}?error=any")
        errors = sum(summary["errors"].values())
        assert browser.find_element("id", "counts").text.startswith(f"{errors} matching")
    open_page(browser, view_url + "#/episodes/2?sort=policy_version&desc=1")
    first = browser.find_element("css selector", "#episodes tbody tr td:last-child").text
    assert first == "20"
    open_page(browser, view_url + "#/episodes/0")
    browser.save_screenshot(str(shots / "episodes.png"))


def test_an_episode_s_token_colours_follow_its_loss_mask(
    browser: Any, view_url: str, eval_runs: list[Path], shots: Path
) -> None:
    saved = lines(eval_runs[0])[1]
    open_page(browser, view_url + "#/episode/0/1")
    spans = browser.execute_script(
        "return [...document.querySelectorAll('.tokens .tok')].map(s => "
        "[s.className, Number(s.dataset.mask), getComputedStyle(s).color, s.title])"
    )
    assert len(spans) == len(saved["tokens"])
    model_colour = {colour for cls, _, colour, _ in spans if cls == "tok k-model"}
    assert len(model_colour) == 1
    for (cls, mask, colour, title), want, logprob in zip(
        spans, saved["loss_mask"], saved["logprobs"], strict=True
    ):
        assert mask == want
        assert (cls == "tok k-model") == (want == 1)
        assert (colour in model_colour) == (want == 1)
        if want == 1:
            assert f"logprob {logprob:.4f}" in title
    first_sampled = saved["loss_mask"].index(1)
    assert {cls for cls, *_ in spans[:first_sampled]} == {"tok k-prompt"}
    assert "<|im_start|>" in browser.find_element("css selector", ".tokens").text
    browser.save_screenshot(str(shots / "episode.png"))
    browser.find_element("id", "text-toggle").click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30).until(lambda b: b.find_elements("css selector", ".tokens .seg"))
    assert not browser.find_elements("css selector", ".tokens .tok")
    text = browser.find_element("css selector", ".tokens").text
    assert "<|im_start|>assistant" in text and "↵" not in text


def test_two_runs_side_by_side_on_the_same_task(
    browser: Any, view_url: str, eval_runs: list[Path], shots: Path
) -> None:
    task = lines(eval_runs[0])[0]["task_id"]
    open_page(browser, view_url + f"#/compare?a=0&b=1&task={task}")
    sides = browser.find_elements("css selector", ".compare .episode")
    assert [s.get_attribute("data-run") for s in sides] == ["0", "1"]
    for side in sides:
        assert f"task\n{task}" in side.text or f"task {task}" in side.text
        assert side.find_elements("css selector", ".tok.k-model")
    browser.save_screenshot(str(shots / "compare.png"))
