"""The dashboard's status widget as a person sees it. Its function runs on the local runtime the way CloudWatch
calls it (a ``widgetContext`` with the widget's size in pixels); headless Chromium opens the HTML it returned in a
window of exactly that size and takes a screenshot (into the test's temporary directory); the test reads the
page's visible text and measures that it fits the widget without scrolling: for a healthy outbox, and for one
with dead letters, a durable DLQ with messages and a broken chain.

The browser is Debian's ``chromium`` with its ``chromium-driver``, driven by selenium. ``make test`` installs them
where it can (as root, with apt-get) and then sets ``OUTBOX_BROWSER=required``: without the browser, the test
fails there instead of skipping; anywhere else it skips and says how to install it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from outbox import TerminalError
from outbox.local import faults
from outbox.ops.status_html import document
from outbox_cdk import status_widget
from tests.e2e.backends import LocalBackend
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import broken_consumer
from tests.e2e.test_tamper_evidence import rewrite_with_recomputed_hashes, run_anchoring

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REQUIRED = "OUTBOX_BROWSER"  # "required": make test installed the browser, so a missing one is a failure
# The widgets' boxes, in CSS pixels: a wide one, as this stack's widget (the dashboard's whole width, 8 rows)
# is on a laptop's screen, and the size in CloudWatch's documented example of a widgetContext.
WIDE, DOCUMENTED = (1184, 360), (588, 369)
# What a reader must see as text, not as markup (a TerminalError's message is kept in its dead letter).
HOSTILE = '<script>alert("tag")</script><img src=x onerror=alert(document.domain)> & said no'

MEASURE = """
const root = document.documentElement;
const handlers = [...document.querySelectorAll('*')].filter(
    element => [...element.attributes].some(attribute => attribute.name.startsWith('on'))).length;
return {
    text: document.body.innerText,
    scrollWidth: root.scrollWidth,
    scrollHeight: root.scrollHeight,
    contentHeight: document.querySelector('.outbox-status').getBoundingClientRect().height,
    windowWidth: window.innerWidth,
    windowHeight: window.innerHeight,
    scripts: document.querySelectorAll('script').length,
    handlers: handlers,
};
"""


@dataclass(frozen=True)
class Seen:
    """What the browser showed: the page's visible text, its size, and what in it could run."""

    text: str
    width: int
    height: int
    scroll_width: int
    scroll_height: int
    content_height: float
    scripts: int
    handlers: int
    screenshot: tuple[int, int]

    def fits(self) -> bool:
        return self.scroll_width <= self.width and self.scroll_height <= self.height


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package (requirements-dev.txt: make setup)")
    if missing:
        why = (
            f"no browser to look at the widget with: {', '.join(missing)} missing. Install Debian's browser with "
            "apt-get install chromium chromium-driver (as root; make test does where it can)"
        )
        if os.environ.get(REQUIRED) == "required":
            pytest.fail(f"{why}; {REQUIRED}=required says it was installed")
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def widget_html(local: LocalBackend, width: int, height: int) -> str:
    """Invoke the widget's function as CloudWatch does, with the widget's size; the HTML it returns."""
    context = {
        "dashboardName": "OutboxEngine-Dashboard",
        "widgetId": "widget-2",
        "accountId": "123456789012",
        "locale": "en",
        "timezone": {"label": "UTC", "offsetISO": "+00:00", "offsetInMinutes": 0},
        "period": 300,
        "theme": "light",
        "title": status_widget.TITLE,
        "params": None,
        "width": width,
        "height": height,
    }
    html = local.function_running(status_widget.HANDLER).invoke({"widgetContext": context})
    assert isinstance(html, str), html
    return html


def look(browser: Any, html: str, size: tuple[int, int], screenshot: Path) -> Seen:
    """Open ``html`` in a window of the widget's ``size`` and take a screenshot."""
    width, height = size
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    page = screenshot.with_suffix(".html")
    page.write_text(document(html), encoding="utf-8")
    browser.get(page.as_uri())
    assert browser.save_screenshot(str(screenshot))
    measured = browser.execute_script(MEASURE)
    assert (measured["windowWidth"], measured["windowHeight"]) == size
    header = screenshot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return Seen(
        text=measured["text"],
        width=width,
        height=height,
        scroll_width=measured["scrollWidth"],
        scroll_height=measured["scrollHeight"],
        content_height=measured["contentHeight"],
        scripts=measured["scripts"],
        handlers=measured["handlers"],
        screenshot=struct.unpack(">II", header[16:24]),
    )


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_healthy_outbox_says_so_with_its_last_anchoring_pass(
    local: LocalBackend, browser: Any, tmp_path: Path
) -> None:
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    local.settle()
    run_anchoring(local)

    seen = look(browser, widget_html(local, *WIDE), WIDE, tmp_path / "healthy.png")

    text = flat(seen.text)
    assert "Healthy: nothing needs an operator" in text
    assert "1 tenant: every chain intact · 1 of 1 anchored · last anchoring pass: 20" in text
    assert "Dead-letter queues: all 8 empty" in text  # the example's WORKFLOW settle pass's among them
    assert tenant in text
    assert "needs attention" not in text
    assert seen.screenshot == WIDE
    assert seen.fits(), seen
    assert (seen.scripts, seen.handlers) == (0, 0)


@pytest.mark.parametrize("size", [WIDE, DOCUMENTED], ids=["wide", "documented"])
def test_dead_letters_and_a_broken_chain_are_shown_with_their_commands(
    local: LocalBackend, browser: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    tenant = unique("tenant")
    with faults.fail_handler("pet_tag.mark_ordered", times=1, error=lambda: TerminalError(HOSTILE)):
        order_and_pay(local, tenant)  # a dead letter, whose message is hostile markup
        local.settle()
    with broken_consumer():  # messages in the durable DLQ
        order_and_pay(local, tenant)
        local.settle()
    run_anchoring(local)
    rewrite_with_recomputed_hashes(local, tenant, seq=1)  # the anchor contradicted: a broken chain
    local.settle()

    seen = look(browser, widget_html(local, *size), size, tmp_path / f"troubled-{size[0]}.png")

    text = flat(seen.text)
    assert "problems need attention (outbox status says each with its command) · read" in text
    assert "Tenants needing attention (1 of " in text
    assert "broken at seq" in text
    assert f"outbox verify-chain --tenant {tenant}; outbox findings --tenant {tenant}" in text
    assert "Failure groups (1)" in text
    assert f"terminal: TerminalError: {HOSTILE}" in text  # as text: nothing of it became markup
    assert "outbox replay --group g-" in text
    assert "durable-dlq" in text
    assert "The consumer could not process them: fix it, then outbox redrive" in text
    assert seen.screenshot == size
    assert seen.fits(), seen
    assert (seen.scripts, seen.handlers) == (0, 0)


def test_described_it_says_what_it_shows(local: LocalBackend) -> None:
    described = local.function_running(status_widget.HANDLER).invoke({"describe": True})
    assert described.startswith("## Outbox status")
