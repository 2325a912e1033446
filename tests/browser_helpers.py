"""One way to open a dslogs page in headless Chromium for a test: offline (only file: URLs load;
any other request is recorded and aborted), with console errors, page errors and dialogs
recorded, and, with JavaScript on, after the page says it is ready."""

from __future__ import annotations

from pathlib import Path


class Loaded:
    def __init__(self, page, errors, blocked, dialogs):
        self.page, self.errors, self.blocked, self.dialogs = page, errors, blocked, dialogs


def open_offline(browser, path: Path, js: bool = True, width: int = 1280) -> Loaded:
    ctx = browser.new_context(viewport={"width": width, "height": 900}, java_script_enabled=js)
    errors, blocked, dialogs = [], [], []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: blocked.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    if js:
        page.wait_for_function("window.dslogs && window.dslogs.ready", timeout=30000)
        page.evaluate("window.dslogs.ready")
    return Loaded(page, errors, blocked, dialogs)
