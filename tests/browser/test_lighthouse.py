"""Lighthouse (npm's `lighthouse`, its default mobile profile: a mid-range phone on a slow
4G link, simulated) on six pages of the real server (`commonplace web`, gunicorn on
loopback) with Debian's Chromium: home, the week's letter with real run cards, an entry,
a ZeRO run's page, the calculator and search. Each must score performance >= 98 and
accessibility 100, with its largest contentful paint within 2.0 s.

The pages are audited one after another against one server (each audit starts its own
Chromium); as_a_phone says how a busy host is allowed for, and what still fails. The CLI
is found through COMMONPLACE_LIGHTHOUSE, then .lighthouse/node_modules/.bin (`npm install
--prefix .lighthouse lighthouse@12.8.2`), then the PATH; without it the test is skipped,
except in CI (COMMONPLACE_REQUIRE_BROWSER), where that is a failure. Each page's report is
kept in test-artifacts/lighthouse/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from app import create_app
from app.journal import posting
from app.notebook.isoweeks import iso_week, today
from tests.browser.harness import ARTIFACTS, BROWSER, CHROMIUM, ROOT
from tests.helpers import create_entry
from tests.real_runs import lab_output, store_run
from tests.tailnet import WebServer

PERFORMANCE, ACCESSIBILITY, LCP_MS = 0.98, 1.0, 2000
MOBILE_SLOWDOWN = 4  # Lighthouse's own mobile profile
DESKTOP_INDEX, SLOW_HOST_INDEX = 1500, 1000  # Lighthouse's throttling docs and its warning
AUDIT_SECONDS = 180  # one Lighthouse run, its Chromium included
LOADS = 3  # page loads one page may take: a busy host's load comes and goes
# Lighthouse's runtime errors that are the server's answer, not the host's load: loaded
# again, the page would fail the same way.
PAGE_FAULTS = {"NO_DOCUMENT_REQUEST", "FAILED_DOCUMENT_REQUEST", "ERRORED_DOCUMENT_REQUEST",
               "INSECURE_DOCUMENT_REQUEST", "CHROME_INTERSTITIAL_ERROR", "NOT_HTML",
               "INVALID_URL", "DNS_FAILURE"}


def lighthouse() -> str | None:
    found = os.environ.get("COMMONPLACE_LIGHTHOUSE")
    if found:
        return found
    local = ROOT / ".lighthouse" / "node_modules" / ".bin" / "lighthouse"
    return str(local) if local.exists() else shutil.which("lighthouse")


LIGHTHOUSE = lighthouse()
if LIGHTHOUSE is None and os.environ.get("COMMONPLACE_REQUIRE_BROWSER"):
    raise RuntimeError("COMMONPLACE_REQUIRE_BROWSER is set but npm's lighthouse is not "
                       "installed (COMMONPLACE_LIGHTHOUSE, .lighthouse/ or the PATH)")

pytestmark = [*BROWSER, pytest.mark.skipif(
    LIGHTHOUSE is None, reason="npm's lighthouse is not installed: npm install --prefix "
    ".lighthouse lighthouse@12.8.2 (or set COMMONPLACE_LIGHTHOUSE); CI installs it")]

NOTE = ("## Notes\n\nThe 1F1B schedule against GPipe with **8 micro-batches**: the bubble "
        "fell as the model says. See [[Pipeline notes 0]] and #parallelism.\n\n"
        "```python\nloss = model(batch).sum()\nloss.backward()\n```\n")


@pytest.fixture
def pages(data_dir, tmp_path_factory):
    """The real server, with a week of notes and a real ZeRO and pipeline run carded into
    the letter: (base URL, {kind: path})."""
    server = WebServer(data_dir, COMMONPLACE_AUTH="dev")
    try:
        app = create_app({"DATA_DIR": data_dir,
                          "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db"})
        runs = {name: store_run(app, name, lab_output(tmp_path_factory, name))
                for name in ("zero", "pipeline")}
        posting.post_cards(app.extensions["db"], "UTC")
        client = app.test_client()
        for n in range(8):
            entry = create_entry(client, title=f"Pipeline notes {n}", body=NOTE,
                                 tags="parallelism")
        yield server.base, {
            "home": "/", "letter": f"/weeks/{iso_week(today('UTC'))}",
            "entry": f"/entries/{entry}", "run": f"/runs/{runs['zero']}",
            "calculator": "/calculator", "search": "/search?q=pipeline"}
    finally:
        server.close()


SETTINGS = ["--only-categories=performance,accessibility", "--form-factor=mobile",
            "--chrome-flags=--headless=new --no-sandbox --disable-gpu"]


class Lost(Exception):
    """A Lighthouse run that ended without a report of the page: its Chromium lost, never
    reached, or too slow to answer on a loaded host."""


def run_lighthouse(args: list[str], report: Path) -> dict:
    """One Lighthouse run; its report. A run the page failed (PAGE_FAULTS) fails the test
    at once. Any other run without a report raises Lost with the end of what Lighthouse
    wrote: its log (not --quiet: where it stopped), and chrome-launcher's copy of
    Chromium's own stderr when the browser never answered."""
    report.unlink(missing_ok=True)  # never the report of an earlier run
    proc = subprocess.Popen([LIGHTHOUSE, *args, *SETTINGS, "--output=json",
                             f"--output-path={report}"],
                            env={**os.environ, "CHROME_PATH": CHROMIUM or ""},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log, _ = proc.communicate(timeout=AUDIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # chrome-launcher kills its Chromium, then exits
        try:
            log, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
        raise Lost(f"no report within {AUDIT_SECONDS} s:\n{tail(log)}") from None
    result = json.loads(report.read_text()) if report.exists() else {}
    error = result.get("runtimeError") or {}
    if error.get("code") in PAGE_FAULTS:
        pytest.fail(f"Lighthouse could not audit {result['requestedUrl']}: {error['code']}: "
                    f"{error.get('message')}")
    if proc.returncode or not result or error:
        raise Lost(f"exit {proc.returncode}, {error.get('code', 'no report')}:\n{tail(log)}")
    return result


def tail(log: str, lines: int = 25) -> str:
    """The end of a run's log, without chrome-launcher's line for each poll of a browser
    that does not answer (fifty of them), which would hide what came before."""
    kept = [line for line in log.strip().splitlines() if "Waiting for browser" not in line]
    return "\n".join(kept[-lines:])


def loaded(url: str, folder: Path) -> dict:
    """The page loaded once and scored as Lighthouse's phone, the page load kept in
    folder (-GA: its trace, and the host's benchmark index measured just before it)."""
    folder.mkdir(parents=True, exist_ok=True)
    return run_lighthouse([url, f"-GA={folder}",
                           f"--throttling.cpuSlowdownMultiplier={MOBILE_SLOWDOWN}"],
                          folder / "report.json")


def rescored(folder: Path, slowdown: float) -> dict:
    """The same page load scored at another CPU slowdown. Lighthouse's default throttling
    is simulated: the phone is computed from the trace after the page has loaded, so the
    slowdown enters only there (-A), and no second page load is needed. Lighthouse
    refuses an audit whose settings differ from the gather's, so the kept gather is told
    the slowdown it is scored at."""
    artifacts = folder / "artifacts.json"
    kept = json.loads(artifacts.read_text())
    kept["settings"]["throttling"]["cpuSlowdownMultiplier"] = slowdown
    artifacts.write_text(json.dumps(kept))
    return run_lighthouse([f"-A={folder}", f"--throttling.cpuSlowdownMultiplier={slowdown}"],
                          folder / "report.json")


def slowdown_for(result: dict) -> float:
    """Lighthouse's 4x slowdown is calibrated for a desktop whose benchmark index is about
    DESKTOP_INDEX (its throttling docs); a host measured slower than its own "slow host"
    mark (a shared CI core, other tests beside it) would be scored as a phone several times
    slower than that, so the slowdown is scaled by what the host measured."""
    index = result["environment"]["benchmarkIndex"]
    if index >= SLOW_HOST_INDEX:
        return MOBILE_SLOWDOWN
    return max(1.0, MOBILE_SLOWDOWN * index / DESKTOP_INDEX)


def scores(result: dict) -> tuple[float, float, float]:
    return (result["categories"]["performance"]["score"],
            result["categories"]["accessibility"]["score"],
            result["audits"]["largest-contentful-paint"]["numericValue"])


def short_of(result: dict) -> bool:
    perf, a11y, lcp = scores(result)
    return perf < PERFORMANCE or a11y < ACCESSIBILITY or lcp > LCP_MS


def only_slow(result: dict) -> bool:
    """Short on speed alone, which a busy host can cause; accessibility it cannot."""
    perf, a11y, lcp = scores(result)
    return a11y >= ACCESSIBILITY and (perf < PERFORMANCE or lcp > LCP_MS)


def as_a_phone(url: str, folder: Path) -> tuple[dict, float]:
    """The page scored as a mid-tier phone sees it, and the CPU slowdown that took. A page
    load that falls short on speed on a host its own benchmark measured slow is scored
    again at the slowdown that measurement calls for. The load of a busy host comes and
    goes between the benchmark and the page load, so a page still short is loaded again,
    LOADS times in all, and the best score counts; a run that ended without a report
    (Lost) is tried again as well. A page short every time fails, and so does one that
    Lighthouse never got a report of, with why."""
    best, lost = None, []
    for _ in range(LOADS):
        try:
            result, slowdown = loaded(url, folder), MOBILE_SLOWDOWN
            if only_slow(result) and slowdown_for(result) < MOBILE_SLOWDOWN:
                slowdown = slowdown_for(result)
                result = rescored(folder, slowdown)
        except Lost as crash:
            lost.append(str(crash))
            continue
        if not only_slow(result):
            return result, slowdown  # fast enough, or short on what load cannot cause
        if best is None or scores(result)[0] > scores(best[0])[0]:
            best = (result, slowdown)
    if best is None:
        pytest.fail(f"{url}: no Lighthouse report in {LOADS} runs:\n" + "\n\n".join(lost))
    return best


def test_six_pages_score_as_a_phone_sees_them(pages, tmp_path):
    base, paths = pages
    folder = ARTIFACTS / "lighthouse"
    folder.mkdir(parents=True, exist_ok=True)
    found, short = [], []
    for kind, path in paths.items():
        result, slowdown = as_a_phone(base + path, tmp_path / kind)
        shutil.copyfile(tmp_path / kind / "report.json", folder / f"{kind}.json")
        perf, a11y, lcp = scores(result)
        fcp = result["audits"]["first-contentful-paint"]["numericValue"]
        found.append(f"{kind:<11} perf {perf:.2f}  a11y {a11y:.2f}  FCP {fcp:5.0f} ms  "
                     f"LCP {lcp:5.0f} ms  (CPU slowdown {slowdown:.1f}x, host index "
                     f"{result['environment']['benchmarkIndex']:.0f})")
        if short_of(result):
            failing = [a["title"] for a in result["audits"].values()
                       if a.get("score") is not None and a["score"] < 0.9
                       and a.get("scoreDisplayMode") in ("binary", "numeric", "metricSavings")]
            short.append(f"{kind} ({path}): {found[-1]}; audits below 0.9: {failing}")
    print("\n" + "\n".join(found))
    assert not short, "\n".join(short)
