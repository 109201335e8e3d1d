"""The run page in a real headless browser: Debian's chromium driven by selenium.

Checks that the step timeline is drawn (every bar has a size) in the light and the
dark admin theme, and saves screenshots to ``.tmp/artifacts/``. With
``DURABLE_JOBS_UPDATE_DOCS=1`` the light one is also copied to ``docs/timeline.png``
(the docs' picture). Skipped, saying why, where chromium is not installed;
``.ci/run`` installs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepStatus
from tests.factories import T0, JobRunFactory, StepRecordFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPO_DIR = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_DIR / ".tmp" / "artifacts"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

TRACEBACK = """Traceback (most recent call last):
  File "shop/jobs.py", line 31, in sync_crm
    response = client.post("/contacts", json=contact)
  File "crm/client.py", line 88, in post
    raise ConnectionError(f"{self.host} timed out after 10s")
ConnectionError: crm.example.com timed out after 10s
"""


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "needs Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; .ci/run installs them)"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,1000",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options
    )
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def at(seconds: float) -> Any:
    return T0 + timedelta(seconds=seconds)


def demo_run() -> JobRun:
    """A run with completed (one replayed, one retried), failed, sleeping and waiting steps."""
    run = JobRunFactory.create(
        job_name="tests.onboarding",
        status=RunStatus.WAITING,
        args=[],
        kwargs={"user_id": 42},
        attempt=2,
        created_at=T0,
        started_at=at(0.2),
        wake_at=at(3900 + 30),
    )
    steps: list[dict[str, Any]] = [
        {"name": "load-user", "started_at": at(0.3), "completed_at": at(0.45),
         "output": {"id": 42, "email": "ada@example.com", "note": "<script>alert(1)</script>"}},
        {"name": "send-welcome", "started_at": at(0.5), "completed_at": at(95), "attempts": 2,
         "output": {"message_id": "<20260101.42@example.com>"}},
        {"name": "sync-crm", "status": StepStatus.FAILED, "started_at": at(95.2),
         "completed_at": None, "attempts": 3, "output": None, "error_type": "ConnectionError",
         "error": "crm.example.com timed out after 10s", "traceback": TRACEBACK},
        {"name": "sleep:1h", "kind": "sleep", "started_at": at(96), "completed_at": at(3700),
         "wake_at": at(3696), "output": None},
        {"name": "cool-off", "kind": "sleep", "status": StepStatus.SLEEPING,
         "started_at": at(3700), "completed_at": None, "wake_at": at(7200), "output": None},
        {"name": "wait-order", "kind": "wait", "status": StepStatus.WAITING,
         "started_at": at(3800), "completed_at": None, "event": "order.paid",
         "correlation_key": "42", "event_cursor": 17, "wake_at": at(3930),
         "deadline": at(3800 + 7 * 86400), "output": None},
    ]  # fmt: skip
    for values in steps:
        StepRecordFactory.create(run=run, **values)
    return run


def click_and_load(browser: Any, element: Any) -> None:
    """Click something that loads a new page and wait until the old page is gone: a
    find_element straight after a click may otherwise find the old page's element
    (then stale by the time it is read)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    old = browser.find_element(By.TAG_NAME, "html")
    element.click()

    def gone(_: Any) -> bool:
        # Selenium's staleness_of, plus chromedriver's other word for it: asked about
        # a node while the new document replaces the old, it may answer "Node with
        # given id does not belong to the document" instead of a stale reference.
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    WebDriverWait(browser, 30).until(gone)


def log_in(browser: Any, live_server: Any, django_user_model: Any) -> None:
    from selenium.webdriver.common.by import By

    django_user_model.objects.create_superuser("admin", "admin@example.com", "secret-pw")
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("secret-pw")
    click_and_load(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    assert browser.find_elements(By.ID, "user-tools"), "login failed"


def check_timeline(browser: Any) -> dict[str, Any]:
    from selenium.webdriver.common.by import By

    timeline = browser.find_element(By.ID, "timeline")
    assert timeline.is_displayed()
    bars = {
        row.get_attribute("data-step"): row.find_element(By.CSS_SELECTOR, ".djdj-bar")
        for row in browser.find_elements(By.CSS_SELECTOR, "details.djdj-step")
    }
    assert list(bars) == [
        "load-user", "send-welcome", "sync-crm", "sleep:1h", "cool-off", "wait-order",
    ]  # fmt: skip
    for name, bar in bars.items():
        assert bar.is_displayed(), name
        assert bar.size["width"] > 0 and bar.size["height"] > 0, (name, bar.size)
    # Each status has its own colour.
    colours = {
        name: bar.value_of_css_property("border-color")
        if "wait" in (bar.get_attribute("class") or "")
        else bar.value_of_css_property("background-color")
        for name, bar in bars.items()
    }
    assert colours["sync-crm"] != colours["load-user"]
    # The failed step is open: its error shows; outputs are text, not markup.
    assert "crm.example.com timed out" in timeline.text
    browser.find_element(By.CSS_SELECTOR, "#step-1 > summary").click()
    assert "<script>alert(1)</script>" in browser.find_element(By.CSS_SELECTOR, "#step-1").text
    return {"background": browser.find_element(By.TAG_NAME, "body").value_of_css_property(
        "background-color"
    )}  # fmt: skip


def screenshot(browser: Any, name: str) -> Path:
    for _ in range(2):  # the second time, the height after the page reflowed
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1440, min(int(height) + 140, 3000))
    browser.execute_script("window.scrollTo(0, 0)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert browser.save_screenshot(str(path))
    return path


def test_run_page_timeline_in_a_browser(
    browser: Any, live_server: Any, django_user_model: Any, clock: FakeClock
) -> None:
    clock.set(at(3900))
    run = demo_run()
    log_in(browser, live_server, django_user_model)
    url = f"{live_server.url}/admin/django_durable_jobs/jobrun/{run.pk}/change/"

    # The picture is of the page, not the navigation: fold the admin's sidebar.
    browser.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    browser.execute_script("localStorage.setItem('theme', 'light')")
    browser.get(url)
    light = check_timeline(browser)
    picture = screenshot(browser, "timeline.png")

    browser.execute_script("localStorage.setItem('theme', 'dark')")
    browser.get(url)
    dark = check_timeline(browser)
    screenshot(browser, "timeline-dark.png")
    assert light["background"] != dark["background"]  # the admin's theme did switch

    if os.environ.get("DURABLE_JOBS_UPDATE_DOCS") == "1":
        (REPO_DIR / "docs").mkdir(exist_ok=True)
        shutil.copyfile(picture, REPO_DIR / "docs" / "timeline.png")
