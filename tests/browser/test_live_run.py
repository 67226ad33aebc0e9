"""Starting a run from the generated form in a real browser at phone size, against the real
server (`commonplace up`), and watching its page update live while we play the runner over
HTTP: progress, log lines (as text, never markup), and finally the result card.

`up` also starts a local runner; the run asks for eight GPUs (device cuda, world_size 8)
so that only our pretend runner, which says it has them, can lease it.
"""

from __future__ import annotations

import json
import time
import urllib.request

from app import create_app
from tests.browser.harness import BROWSER, assert_fits, chromium_page, hard_timeout
from tests.helpers import add_token

pytestmark = BROWSER
TEST_SECONDS = 150  # a hard limit for one test, browser start included


RESULT = {
    "status": "succeeded", "environment": {"backend": "nccl", "torch": "2.5.1"},
    "strategies": [{
        "strategy": "ddp", "label": "torch DDP", "tokens_per_s": 123456.0,
        "step_time_s": {"median": 0.0123, "p10": 0.012, "p90": 0.013},
        "prediction": {"step_time_s": 0.010, "dominant": "comm"}, "ratios": {"step_time": 1.23},
        "mfu": {"value": 0.41}, "correctness": {"passed": True, "max_grad_abs_error": 1e-7},
    }],
}


class PretendRunner:
    """The runner protocol spoken by hand (see app/runner_api/views.py), loopback only."""

    def __init__(self, base: str, token: str):
        self.base, self.token = base, token
        self.run_id = self.epoch = None

    def post(self, path: str, body: dict) -> dict | None:
        request = urllib.request.Request(
            f"{self.base}/api/v1/runner{path}", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=40) as response:
            text = response.read()
            return json.loads(text) if text else None

    def lease(self, run_id: int, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            answer = self.post("/lease", {"wait": 2})
            if answer:
                assert answer["run"]["id"] == run_id, answer
                self.run_id, self.epoch = run_id, answer["run"]["epoch"]
                return
        raise TimeoutError(f"run {run_id} was not offered to the runner within {seconds}s")

    def call(self, what: str, **body) -> dict | None:
        return self.post(f"/runs/{self.run_id}/{what}", {"epoch": self.epoch, **body})


def runner_token(data_dir) -> str:
    """A runner token in the live server's database (what `commonplace token create` does)."""
    app = create_app({"DATA_DIR": data_dir,
                      "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db"})
    return add_token(app.extensions["db"], "browser-test-runner", "runner")


def test_start_a_run_and_watch_it_live_on_a_phone(live_server, data_dir):
    runner = PretendRunner(live_server, runner_token(data_dir))
    runner.post("/register", {"labels": {"gpu_count": 8, "gpu_model": "pretend"},
                              "version": "browser-test"})

    with hard_timeout(TEST_SECONDS), chromium_page("phone") as (page, problems):
        page.goto(live_server + "/experiments")
        assert_fits(page)
        page.locator("#data_parallel").get_by_role("link", name="New run").click()
        page.wait_for_url("**/experiments/data_parallel/run")
        assert_fits(page)
        page.fill("#p-steps", "1")
        page.fill("#p-world_size", "8")
        page.select_option("#p-device", "cuda")
        page.get_by_role("button", name="Run data_parallel").click()
        page.wait_for_url("**/runs/*")
        run_id = int(page.url.rsplit("/", 1)[1])
        assert page.locator("h1").inner_text().startswith(f"Run {run_id}")
        assert page.locator("#run-status").inner_text() == "queued"
        assert_fits(page)
        # Anything that reloads the page would wipe this; live updates must not.
        page.evaluate("window.__stillTheSamePage = true")

        runner.lease(run_id)
        runner.call("transition", to="RUNNING", environment={"host": "pretend-gpu"})
        # before its first step a run says what it is doing, and the bar is busy (no value)
        runner.call("heartbeat", step=0, total=0, progress={"phase": "loading"})
        page.locator("#progress-text", has_text="loading torch").wait_for()
        assert page.evaluate("!document.getElementById('run-progress').hasAttribute('value')")
        assert "phase" not in page.locator("#progress-extras").inner_text()
        runner.call("heartbeat", step=1, total=4,
                    progress={"strategy": "ddp", "tokens_per_s": 12345.6})
        page.locator("#progress-text", has_text="step 1 of 4").wait_for()
        page.locator("#progress-extras", has_text="ddp").wait_for()
        page.locator("#run-status", has_text="running").wait_for()

        first = "rank 0: warm-up done\n<b>not markup</b>\n"
        runner.call("logs", offset=0, data=first)
        page.locator("#run-log", has_text="warm-up done").wait_for()
        runner.call("logs", offset=len(first.encode()), data="rank 0: step 3 timed\n")
        runner.call("heartbeat", step=3, total=4, progress={"strategy": "ddp"})
        page.locator("#progress-text", has_text="step 3 of 4").wait_for()
        page.locator("#run-log", has_text="step 3 timed").wait_for()
        log = page.locator("#run-log")
        assert "<b>not markup</b>" in log.inner_text()  # shown as text …
        assert log.locator("b").count() == 0  # … never parsed as HTML
        assert page.evaluate("window.__stillTheSamePage === true")
        assert_fits(page)

        runner.call("result", result=RESULT)
        runner.call("transition", to="SUCCEEDED", exit_code=0)
        # Finished: the page reloads once by itself and shows the result card.
        page.locator("figure.run-card", has_text="torch DDP").wait_for(timeout=20_000)
        assert page.locator("#run-status").inner_text() == "succeeded"
        assert page.evaluate("window.__stillTheSamePage === undefined")
        assert "step 3 timed" in page.locator("#run-log").text_content()  # folded away
        assert_fits(page)
        page.wait_for_timeout(2_000)  # and it stays put: no polling, no reload loop
        assert page.locator("figure.run-card").count() == 1

        # The scheduler appends the card to this week's letter, which Home shows in full.
        card = page.locator(f'figure.run-card a[href="/runs/{run_id}"]')
        deadline = time.monotonic() + 30
        while True:
            page.goto(live_server + "/")
            if card.count():
                break
            assert time.monotonic() < deadline, "the card never reached this week's letter"
            page.wait_for_timeout(1_000)
        assert_fits(page)
        assert problems == []

