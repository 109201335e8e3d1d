"""The dashboard and the workers page in real headless Chromium, at 1400 px and at
800 px with the admin's sidebar open (its default), light and dark: the charts are
drawn (every line and bar has a size), the page never scrolls sideways, every list
column's header and cells end inside the table's box and the window (measured, not
eyeballed), job names and ids stay on one line and the timeline's axis labels stand
apart.

Screenshots go to ``.tmp/artifacts/``; with ``DURABLE_JOBS_UPDATE_DOCS=1`` the light
1400 px ones are also copied to ``docs/`` (the docs' pictures).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.worker import presence
from tests.browser.test_admin_browser import ARTIFACTS, REPO_DIR, browser, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["browser"]  # the fixture

JOBS = ("shop.sync_order", "shop.send_receipt", "crm.import_contacts", "billing.charge")
CODES = ("X_JOB_TIMEOUT", "X_CHILD_FAILED", "X_NON_RETRIABLE")
#: 1400 px and 800 px, with the admin's sidebar open: its default, so what an operator
#: sees first (the list has 300 px less than with it folded).
SIZES = ((1400, "wide", True), (800, "narrow", True))


def busy_day(clock: FakeClock) -> None:
    """A day of runs: steady successes, a burst of failures, a backlog on three queues."""
    rng = random.Random(15)
    now = clock.now()
    rows = []
    for i in range(1500):
        # A third of the runs in the last hour, so that the per-minute chart has a shape.
        end = now - timedelta(seconds=rng.uniform(0, 86400 if i % 3 else 3600))
        took = timedelta(seconds=rng.lognormvariate(0.5, 1.0))
        failed = rng.random() < (0.25 if now - end < timedelta(minutes=20) else 0.04)
        code = rng.choice(CODES) if failed else ""
        # Every other failure the job's own exception (no code), as most real ones are.
        plain = failed and i % 2 == 0
        rows.append(
            JobRun(
                job_name=rng.choice(JOBS),
                status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
                error_code="" if plain else code,
                error_type="builtins.ValueError" if plain else "",
                error="card declined by the issuing bank (insufficient funds)" if plain else "",
                created_at=end - took,
                started_at=end - took,
                finished_at=end,
            )
        )
    for queue, backlog in (("default", 40), ("emails", 120), ("reports", 8)):
        for i in range(backlog):
            status = (RunStatus.QUEUED, RunStatus.SLEEPING, RunStatus.WAITING)[i % 3]
            rows.append(
                JobRun(
                    job_name=rng.choice(JOBS),
                    queue=queue,
                    status=status,
                    created_at=now - timedelta(minutes=i),
                    wake_at=now - timedelta(seconds=30 * i)
                    if status == RunStatus.QUEUED
                    else now + timedelta(hours=1),
                    # Some report their progress (ctx.set_progress): a bar in the list.
                    progress={"done": 5 * i, "total": 200}
                    if status == RunStatus.SLEEPING
                    else None,
                )
            )
    JobRun.objects.bulk_create(rows)
    for name, queues in (
        ("web-1:4242", None),
        ("web-2:977", ["emails"]),
        ("web-3:31", ["reports"]),
    ):
        presence.register(name, queues=queues, concurrency=1, now=now)
    claim("web-1:4242#a1b2c3d4", now=now, lease=timedelta(minutes=1))
    clock.advance("5m")  # web-3 stops beating: lost
    for name in ("web-1:4242", "web-2:977"):
        presence.beat(name, now=clock.now(), executed=rng.randint(100, 900))


def no_sideways_scroll(browser: Any) -> None:
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px"


def assert_columns_in_view(browser: Any) -> None:
    """Every shown column of an admin list in view: each header's and each cell's right
    edge inside the table's scroll box and the window, none behind the scrollbar."""
    from selenium.webdriver.common.by import By

    results = browser.find_element(By.CSS_SELECTOR, ".results")
    cut = browser.execute_script(
        "return arguments[0].scrollWidth - arguments[0].clientWidth", results
    )
    assert cut <= 0, f"the table is cut by {cut}px"
    outside = browser.execute_script(
        """
        const box = document.querySelector('.results').getBoundingClientRect();
        const right = Math.min(box.right, document.documentElement.clientWidth);
        const outside = [];
        for (const cell of document.querySelectorAll('#result_list th, #result_list td')) {
            const rect = cell.getBoundingClientRect();
            if (rect.width === 0) continue;  // a column the narrow layout leaves out
            if (rect.right > right + 0.5 || rect.left < box.left - 0.5)
                outside.push([cell.className, cell.textContent.trim().slice(0, 30),
                              Math.round(rect.left), Math.round(rect.right), Math.round(right)]);
        }
        return outside;
        """
    )
    assert not outside, f"cells outside the table's box: {outside}"


def assert_one_line(browser: Any, selector: str) -> int:
    """Every element matching ``selector`` (a job name, an id) on one line: its box is
    one line high, all its text at one height. Returns how many there are."""
    broken = browser.execute_script(
        r"""
        const broken = [];
        const found = document.querySelectorAll(arguments[0]);
        for (const element of found) {
            const range = document.createRange();
            range.selectNodeContents(element);
            const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
            const style = getComputedStyle(element);
            const line = style.lineHeight === 'normal'
                ? 1.2 * parseFloat(style.fontSize) : parseFloat(style.lineHeight);
            const height = element.getBoundingClientRect().height;
            if (tops.size > 1 || height > line + 1)
                broken.push([element.textContent, tops.size, height, line]);
        }
        return [found.length, broken];
        """,
        selector,
    )
    count, lines = broken
    assert not lines, f"broken over lines: {lines}"
    return int(count)


def assert_timeline_readable(browser: Any, width: int) -> None:
    """The timeline's wake / event / output column is shown at every width (below
    1024 px under each step's status and bar, wrapped: a wait's event, key and deadline
    whole) and the axis labels stand side by side, none over another."""
    from selenium.webdriver.common.by import By

    head = browser.find_element(By.CSS_SELECTOR, ".djdj-axis .djdj-info")
    assert head.is_displayed() and head.text.lower() == "wake / event / output"
    wait = browser.find_element(By.CSS_SELECTOR, '[data-step="wait-approval"] .djdj-info')
    assert wait.is_displayed(), "the wait's event column is hidden"
    assert wait.text.startswith("import.approved key=batch-7, until "), wait.text
    if width < 1024:
        bar = browser.find_element(By.CSS_SELECTOR, '[data-step="wait-approval"] .djdj-track')
        assert wait.rect["y"] >= bar.rect["y"] + bar.rect["height"], (wait.rect, bar.rect)
        cut = browser.execute_script(
            "const e = arguments[0]; return [e.scrollWidth - e.clientWidth, "
            "e.getBoundingClientRect().right - document.documentElement.clientWidth]",
            wait,
        )
        assert max(cut) <= 0, f"the wait's text is cut by {cut}px"
    assert_axis_apart(browser)


def assert_axis_apart(browser: Any) -> None:
    """The axis labels shown (a narrow track shows every other one) stand apart: no
    two consecutive labels' boxes intersect, and both ends and the middle are shown."""
    ticks = browser.execute_script(
        "return [...document.querySelectorAll('.djdj-axis .djdj-tick')]"
        ".map(t => [t.textContent, t.getBoundingClientRect()])"
        ".filter(([_, r]) => r.width > 0).map(([text, r]) => [text, r.left, r.right])"
    )
    assert len(ticks) in (3, 5), ticks
    for (_, _, right), (_, left, _) in itertools.pairwise(ticks):
        assert right < left, f"axis labels overlap: {ticks}"


def show(browser: Any, url: str, width: int, theme: str, sidebar: bool) -> None:
    browser.set_window_size(width, 1000)
    browser.execute_script(
        f"localStorage.setItem('django.admin.navSidebarIsOpen', '{str(sidebar).lower()}');"
        f"localStorage.setItem('theme', '{theme}')"
    )
    browser.get(url)


def save(browser: Any, width: int, name: str) -> None:
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(int(height) + 140, 3000))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / name))
    pictured = name in ("dashboard-wide-light.png", "workers-wide-light.png")  # the docs'
    if os.environ.get("DURABLE_JOBS_UPDATE_DOCS") == "1" and pictured:
        shutil.copyfile(ARTIFACTS / name, REPO_DIR / "docs" / name.replace("-wide-light", ""))


def check_dashboard(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    lines = browser.find_elements(By.CSS_SELECTOR, "polyline.djdj-line")
    assert len(lines) == 6
    for line in lines:
        box = line.rect
        assert box["width"] > 100, box  # drawn across the chart
    bars = browser.find_elements(By.CSS_SELECTOR, "rect[class^='djdj-fill--']")
    assert bars and all(bar.rect["width"] > 0 for bar in bars)
    # The series have their own colours in this theme.
    colours = {line.value_of_css_property("stroke") for line in lines}
    assert len(colours) == 3, colours
    text = browser.find_element(By.ID, "djdj-dashboard").text
    assert "X_JOB_TIMEOUT" in text and "emails" in text


@pytest.mark.parametrize(("width", "size", "sidebar"), SIZES)
def test_dashboard_and_workers_in_a_browser(
    browser: Any,
    live_server: Any,
    django_user_model: Any,
    clock: FakeClock,
    width: int,
    size: str,
    sidebar: bool,
) -> None:
    from selenium.webdriver.common.by import By

    clock.advance("12h")
    busy_day(clock)
    log_in(browser, live_server, django_user_model)
    backgrounds = set()
    for theme in ("light", "dark"):
        show(
            browser,
            f"{live_server.url}/admin/django_durable_jobs/dashboard/",
            width,
            theme,
            sidebar,
        )
        check_dashboard(browser)
        no_sideways_scroll(browser)
        backgrounds.add(
            browser.find_element(By.TAG_NAME, "body").value_of_css_property("background-color")
        )
        save(browser, width, f"dashboard-{size}-{theme}.png")

        show(browser, f"{live_server.url}/admin/django_durable_jobs/worker/", width, theme, sidebar)
        rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
        assert len(rows) == 3
        assert "lost" in rows[1].text or "lost" in rows[2].text
        [in_hand] = browser.find_elements(By.CSS_SELECTOR, "td.field-in_hand a")
        assert "/jobrun/" in (in_hand.get_attribute("href") or "")
        no_sideways_scroll(browser)
        assert_columns_in_view(browser)
        assert assert_one_line(browser, "td.field-in_hand .djdj-job") == 1
        assert_one_line(browser, "td.field-in_hand .djdj-id")
        save(browser, width, f"workers-{size}-{theme}.png")
    assert len(backgrounds) == 2  # the admin's theme did switch


def long_run(clock: FakeClock, steps: int = 200) -> JobRun:
    """A waiting run with ``steps`` completed steps, then a wait."""
    start = clock.now() - timedelta(hours=2)
    run = JobRun.objects.create(
        job_name="crm.import_contacts",
        status=RunStatus.WAITING,
        created_at=start,
        started_at=start,
        attempt=1,
        wake_at=clock.now() + timedelta(seconds=30),
        progress={"done": steps, "total": steps + 40, "stage": "waiting for approval"},
    )
    StepRecord.objects.bulk_create(
        StepRecord(
            run=run,
            name=f"import-page-{i:03d}",
            status=StepStatus.COMPLETED,
            started_at=start + timedelta(seconds=30 * i),
            completed_at=start + timedelta(seconds=30 * i + 20),
            attempts=1,
            output={"page": i, "contacts": 50},
        )
        for i in range(steps)
    )
    StepRecord.objects.create(
        run=run,
        name="wait-approval",
        kind="wait",
        status=StepStatus.WAITING,
        started_at=start + timedelta(seconds=30 * steps),
        event="import.approved",
        correlation_key="batch-7",
        event_cursor=0,
        wake_at=clock.now() + timedelta(seconds=30),
        deadline=start + timedelta(days=7),
        attempts=1,
    )
    return run


@pytest.mark.parametrize(("width", "size", "sidebar"), SIZES)
def test_run_page_and_list_in_a_browser(
    browser: Any,
    live_server: Any,
    django_user_model: Any,
    clock: FakeClock,
    width: int,
    size: str,
    sidebar: bool,
) -> None:
    from selenium.webdriver.common.by import By

    clock.advance("12h")
    busy_day(clock)
    run = long_run(clock)
    log_in(browser, live_server, django_user_model)
    for theme in ("light", "dark"):
        show(browser, f"{live_server.url}/admin/django_durable_jobs/jobrun/", width, theme, sidebar)
        no_sideways_scroll(browser)
        assert_columns_in_view(browser)
        assert assert_one_line(browser, "td.field-job .djdj-job") == 50
        assert assert_one_line(browser, "th.field-short_id .djdj-id") == 50
        save(browser, width, f"runs-{size}-{theme}.png")

        show(
            browser,
            f"{live_server.url}/admin/django_durable_jobs/jobrun/{run.pk}/change/",
            width,
            theme,
            sidebar,
        )
        no_sideways_scroll(browser)
        rows = browser.find_elements(By.CSS_SELECTOR, "details.djdj-step")
        assert len(rows) == 201
        assert_timeline_readable(browser, width)
        # The run's id, in the title and in the block, on one line.
        assert assert_one_line(browser, "#content .djdj-id") == 2
        timeline = browser.find_element(By.ID, "timeline")
        fields = browser.find_element(By.CSS_SELECTOR, "dl.djdj-fields")
        assert timeline.location["y"] < fields.location["y"]  # the timeline first
        # One aligned block: two pairs a row (one at 800 px), the values of each column
        # at one x.
        starts = browser.execute_script(
            "return [...document.querySelectorAll('dl.djdj-fields > dd')].map("
            "d => [d.classList.contains('djdj-field--first'), d.getBoundingClientRect().left])"
        )
        lefts = {first: {round(x) for f, x in starts if f == first} for first in (True, False)}
        # 20 pairs (the job's version among them) and the progress (ctx.set_progress),
        # which spans its row.
        assert len(starts) == 21 and len(lefts[True]) == 1 and len(lefts[False]) == 1, lefts
        if width > 1000:
            assert min(lefts[True]) < min(lefts[False]), lefts
        else:  # one pair a row: a run id is not broken in two
            assert lefts[True] == lefts[False], lefts
        for bar in browser.find_elements(By.CSS_SELECTOR, "details.djdj-step .djdj-bar")[:5]:
            assert bar.size["width"] > 0
        save(browser, width, f"run-{size}-{theme}.png")
        fields.screenshot(str(ARTIFACTS / f"run-fields-{size}-{theme}.png"))


#: Records the address of every fetch the page makes (refresh.js calls the global fetch).
FETCH_SPY = """
window.djdjFetched = [];
const realFetch = window.fetch;
window.fetch = function (url) {
    window.djdjFetched.push(String(url));
    return realFetch.apply(this, arguments);
};
"""


def set_hidden(browser: Any, hidden: bool) -> None:
    """What the browser does when the tab goes to the background (or comes back)."""
    browser.execute_script(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => arguments[0]});"
        "document.dispatchEvent(new Event('visibilitychange'));",
        hidden,
    )


def fetched(browser: Any) -> list[str]:
    return list(browser.execute_script("return window.djdjFetched"))


def open_live_run(browser: Any, live_server: Any, django_user_model: Any, run: JobRun) -> None:
    log_in(browser, live_server, django_user_model)
    show(
        browser,
        f"{live_server.url}/admin/django_durable_jobs/jobrun/{run.pk}/change/",
        1400,
        "light",
        True,
    )
    browser.execute_script(FETCH_SPY)


def test_live_run_page_refreshes_itself(
    browser: Any, live_server: Any, django_user_model: Any, clock: FakeClock
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    run = long_run(clock, steps=3)
    open_live_run(browser, live_server, django_user_model, run)
    browser.find_element(By.CSS_SELECTOR, "#step-1 > summary").click()  # opened by the reader
    assert len(browser.find_elements(By.CSS_SELECTOR, "details.djdj-step")) == 4
    StepRecord.objects.filter(run=run, name="wait-approval").update(
        status=StepStatus.COMPLETED, completed_at=clock.now(), output={"ok": True}
    )
    StepRecord.objects.create(
        run=run, name="apply", status=StepStatus.COMPLETED, started_at=clock.now(),
        completed_at=clock.now(), attempts=1, output=1,
    )  # fmt: skip
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=clock.now())
    # No reload: the page fetches the timeline again (every 5 s) and then stops.
    WebDriverWait(browser, 60).until(
        lambda b: len(b.find_elements(By.CSS_SELECTOR, "details.djdj-step")) == 5
    )
    assert browser.find_element(By.ID, "step-1").get_attribute("open") is not None
    assert browser.find_element(By.ID, "timeline").get_attribute("data-djdj-refresh") == "5"
    assert "succeeded" in browser.find_element(By.CSS_SELECTOR, ".djdj-run-row").text
    # It fetched the timeline alone, not the page again.
    timeline = f"/admin/django_durable_jobs/jobrun/{run.pk}/timeline/"
    assert fetched(browser) and {url.removeprefix(live_server.url) for url in fetched(browser)} == {
        timeline
    }, fetched(browser)


def test_a_hidden_run_page_does_not_refresh(
    browser: Any, live_server: Any, django_user_model: Any, clock: FakeClock
) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    def steps(b: Any) -> int:
        return len(b.find_elements(By.CSS_SELECTOR, "details.djdj-step"))

    run = long_run(clock, steps=3)
    open_live_run(browser, live_server, django_user_model, run)
    set_hidden(browser, True)  # the tab went to the background
    StepRecord.objects.create(
        run=run, name="later", status=StepStatus.COMPLETED, started_at=clock.now(),
        completed_at=clock.now(), attempts=1, output=1,
    )  # fmt: skip
    # Two refresh periods (5 s each) and more: no fetch while hidden.
    with pytest.raises(TimeoutException):
        WebDriverWait(browser, 12).until(lambda b: fetched(b))
    assert steps(browser) == 4
    set_hidden(browser, False)  # back on the tab: fetched at once, not 5 s later
    WebDriverWait(browser, 4).until(lambda b: steps(b) == 5)
    assert len(fetched(browser)) == 1, fetched(browser)
