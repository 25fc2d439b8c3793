"""The report as a user sees it: opened in headless Chromium with the network refused, every chart
drawn with all its traces, no request leaving the page, no script error, no injected script run;
a full-page PNG screenshot is saved in the test's tmp folder.

Needs Debian's ``chromium``. With CI=true a missing browser fails the test; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import report_builders as rb
import report_cdp as cdp

from budgettune.app.report import run_report
from budgettune.report.html import collect_charts, write_report

# One worker runs the browser and the report tests that render the session's sweep (sweep_run):
# a session fixture is made once per worker, and that sweep takes 15-30 s.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("sweep-run")]

LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cdp.Browser]:
    executable = cdp.find_chromium()
    if executable is None:
        message = "chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"{message}; CI=true requires the browser test to run")
        pytest.skip(message)
    opened = cdp.launch(executable, tmp_path_factory.mktemp("chromium-profile"))
    try:
        opened.open_page(width=1200, height=900)
        yield opened
    finally:
        cdp.close(opened)
        assert opened.process.poll() is not None, "chromium outlived the test"


def _wait_for_charts(
    browser: cdp.Browser, expected: dict[str, int], timeout_s: float = 60.0
) -> dict[str, dict[str, int]]:
    """Poll until every expected chart div has drawn its traces (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    state: dict[str, dict[str, int]] = {}
    while time.monotonic() < deadline:
        state = cdp.chart_state(browser)
        if all(state.get(cid, {}).get("traces", 0) >= n for cid, n in expected.items()):
            break
        time.sleep(0.2)
    return state


def test_report_renders_every_chart_offline(browser: cdp.Browser, tmp_path: Path) -> None:
    report = rb.make_report()
    page_path = tmp_path / "report.html"
    write_report(report, page_path)
    expected = {chart.chart_id: len(chart.figure.data) for _, chart in collect_charts(report)}
    assert len(expected) == 10
    start = len(browser.events)
    browser.navigate(page_path.as_uri())
    state = _wait_for_charts(browser, expected)
    for chart_id, traces in expected.items():
        drawn = state.get(chart_id)
        assert drawn is not None, f"{chart_id}: no plotly chart in the page"
        assert drawn["svgs"] >= 1, f"{chart_id}: no SVG container"
        assert drawn["data"] == traces, f"{chart_id}: {drawn['data']} traces loaded of {traces}"
        assert drawn["traces"] == traces, f"{chart_id}: {drawn['traces']} drawn of {traces}"
        assert drawn["marks"] >= 1, f"{chart_id}: traces hold no marks"
    events = browser.events[start:]
    urls = [
        e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
    ]
    assert urls == [page_path.as_uri()], f"the page requested {urls}"
    assert not [e for e in events if e["method"] == "Network.loadingFailed"]
    errors = [e["params"] for e in events if e["method"] == "Runtime.exceptionThrown"]
    assert not errors, json.dumps(errors)[:2000]
    shot = tmp_path / "report.png"
    browser.screenshot(shot)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    height = browser.evaluate("document.documentElement.scrollHeight")
    assert height > 3000  # ten charts, each a few hundred pixels tall


def test_network_requests_are_seen_and_refused(browser: cdp.Browser, tmp_path: Path) -> None:
    """Control for the test above: a page that does reach for the network is caught, and its
    request fails (the proxy is a dead end), so 'no request' there is a real observation."""
    page = tmp_path / "leaky.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="http://example.com/pixel.png">'
        '<script src="https://cdn.plot.ly/plotly-2.0.0.min.js"></script></body></html>'
    )
    start = len(browser.events)
    browser.navigate(page.as_uri())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        failed = [e for e in browser.events[start:] if e["method"] == "Network.loadingFailed"]
        if len(failed) >= 2:
            break
        browser.evaluate("1")
        time.sleep(0.1)
    urls = {
        e["params"]["request"]["url"]
        for e in browser.events[start:]
        if e["method"] == "Network.requestWillBeSent"
    }
    assert {"http://example.com/pixel.png", "https://cdn.plot.ly/plotly-2.0.0.min.js"} <= urls
    failed_ids = {
        e["params"]["requestId"]
        for e in browser.events[start:]
        if e["method"] == "Network.loadingFailed"
    }
    assert len(failed_ids) >= 2, "a network request succeeded: the network is not refused"
    assert browser.evaluate("typeof Plotly") == "undefined"


def test_script_in_a_model_name_is_text(browser: cdp.Browser, tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    page_path = tmp_path / "evil.html"
    write_report(rb.make_report(model_name=evil), page_path)
    start = len(browser.events)
    browser.navigate(page_path.as_uri())
    _wait_for_charts(browser, {"chart-profile": 1})
    assert not [e for e in browser.events[start:] if e["method"] == "Page.javascriptDialogOpening"]
    assert evil in browser.evaluate("document.querySelector('h1').textContent")
    assert evil in browser.evaluate("document.title")
    assert evil in browser.evaluate("document.getElementById('command').textContent")
    # the only script elements are plotly's bundle and the plot calls
    scripts = browser.evaluate(
        "Array.from(document.scripts).filter(s => !s.text.includes('Plotly')).length"
    )
    assert scripts == 0


def test_embedded_engine_sweep_report(
    browser: cdp.Browser, sweep_run: Path, tmp_path: Path
) -> None:
    """The page of a real sweep on the embedded engine, as `budgettune report` writes it."""
    outcome = run_report(sweep_run, output=tmp_path / "sweep.html")
    expected = {chart_id: 1 for chart_id in outcome.chart_ids}
    assert {"chart-profile", "chart-tbt-vs-budget", "chart-tbt-cdf", "chart-timeline"} <= set(
        expected
    )
    start = len(browser.events)
    browser.navigate(outcome.path.as_uri())
    state = _wait_for_charts(browser, expected)
    for chart_id in expected:
        drawn = state.get(chart_id, {})
        assert drawn.get("svgs", 0) >= 1 and drawn.get("traces", 0) >= 1, (chart_id, drawn)
        assert drawn["traces"] == drawn["data"], (chart_id, drawn)
    events = browser.events[start:]
    urls = [
        e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
    ]
    assert urls == [outcome.path.as_uri()], f"the page requested {urls}"
    assert not [e for e in events if e["method"] == "Runtime.exceptionThrown"]
    verdict = browser.evaluate("document.getElementById('verdict-panel').textContent")
    assert "Recommended:" in verdict or "No budget meets" in verdict
    shot = tmp_path / "sweep-report.png"
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
