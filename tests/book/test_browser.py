"""Open every page of the built book in headless Chromium with the network off.

Debian's ``/usr/bin/chromium`` is driven through Playwright (its Python package
ships the driver; ``playwright install`` is never run). The book is served from
``_build/html`` by a local HTTP server on 127.0.0.1; every other request is
recorded and aborted, and Chromium's resolver maps every other host to nothing.
Per page the test asserts: no request left the book or failed, no script error,
mathematics typeset by MathJax (no raw TeX left), every image loaded, widgets
rendered, no error or stderr output cell. A full-page screenshot of each page goes
to ``_build/screenshots/``.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import json
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from book_helpers import ROOT, built_pages
from walls import cannot_start

pytestmark = [pytest.mark.book, pytest.mark.slow]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic",
    # No name resolves except the local server: a request that slips past the
    # router still cannot reach the internet.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
SCREENSHOTS = ROOT / "_build" / "screenshots"
REDIRECT = re.compile(r'http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)

# What the page reports about itself once MathJax is done (run in the browser).
PAGE_REPORT_JS = """
async () => {
  const mathNodes = document.querySelectorAll('.math, div.math, span.math');
  if (mathNodes.length && window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const images = Array.from(document.images);
  for (const img of images) { img.loading = 'eager'; }
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(resolve => { img.onload = img.onerror = resolve; })));
  const prose = document.querySelector('main') || document.body;
  const clone = prose.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, mjx-container, textarea').forEach(n => n.remove());
  const text = clone.textContent;
  const widgetViews = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]').length;
  return {
    mathNodes: mathNodes.length,
    mathJaxLoaded: !!(window.MathJax && MathJax.startup),
    typeset: document.querySelectorAll('mjx-container').length,
    mathErrors: Array.from(document.querySelectorAll('mjx-merror'))
        .map(n => n.getAttribute('data-mjx-error')),
    untypeset: Array.from(document.querySelectorAll('.math'))
        .filter(n => n.tagName !== 'MJX-CONTAINER' && !n.querySelector('mjx-container'))
        .map(n => n.textContent.slice(0, 120)),
    rawTex: ['$$', '\\\\(', '\\\\[', '\\\\begin{'].filter(s => text.includes(s)),
    brokenImages: images.filter(img => !(img.complete && img.naturalWidth > 0))
                        .map(img => img.getAttribute('src')),
    images: images.length,
    widgetViews: widgetViews,
    widgetsRendered: document.querySelectorAll('.jupyter-widgets, .widget-area, .lm-Widget').length,
    errorOutputs: Array.from(document.querySelectorAll(
        '.output.traceback, .output.stderr, .output.error, .cell_output .traceback'))
        .map(n => n.textContent.slice(0, 300)),
  };
}
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@contextlib.contextmanager
def _serve(directory):
    """Serve ``directory`` on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def _offline_chromium(playwright, base_url, profile_dir):
    """A fresh headless Chromium profile where every request not under ``base_url`` is aborted.

    Yields the Playwright context; ``context.outside_requests`` lists the aborted URLs.
    """
    outside = []
    context = playwright.chromium.launch_persistent_context(
        user_data_dir=str(profile_dir), executable_path=CHROMIUM, headless=True,
        args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 900}, service_workers="block")

    def route(route_obj):
        url = route_obj.request.url
        if url.startswith(base_url + "/") or url.startswith(("data:", "blob:")):
            route_obj.continue_()
        else:
            outside.append(url)
            route_obj.abort("blockedbyclient")

    context.route("**/*", route)
    context.outside_requests = outside
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="module")
def playwright():
    """One Playwright driver for the module (its sync API cannot be nested)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        cannot_start("Chromium", f"{CHROMIUM} not found (make sysdeps installs Debian's chromium)")
    with sync_api.sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def server(built_book):
    with _serve(built_book) as url:
        yield url


@pytest.fixture(scope="module")
def browser_context(playwright, server, tmp_path_factory):
    with _offline_chromium(playwright, server, tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


def full_page_png(context, page, path: Path) -> None:
    """Write a PNG of the whole of ``page`` (its full scroll height, as Playwright's
    ``screenshot(full_page=True)``) to ``path``, encoded for speed.

    Chromium's own capture (DevTools ``Page.captureScreenshot`` beyond the viewport) with
    ``optimizeForSpeed``: the same pixels as Playwright's full-page screenshot (compared on
    every chapter page), a larger file, about 40 % less CPU (the book's 17 pages: 31 CPU s
    against 49, most of it in zlib on pages 30,000 pixels tall).
    """
    session = context.new_cdp_session(page)
    try:
        size = session.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = session.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True, "optimizeForSpeed": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    finally:
        session.detach()
    path.write_bytes(base64.b64decode(shot["data"]))


def test_every_page_offline(built_book, server, browser_context):
    pages = built_pages(built_book)
    assert pages, f"no HTML pages under {built_book}"
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)
    problems = []
    math_pages = 0
    for path in pages:
        rel = path.relative_to(built_book).as_posix()
        url = f"{server}/{rel}"
        redirect = REDIRECT.search(path.read_text(encoding="utf-8"))
        if redirect:  # index.html only forwards to the landing page, checked on its own
            target = (path.parent / redirect.group(1)).resolve()
            if target not in {p.resolve() for p in pages}:
                problems.append(f"{rel}: redirects to {redirect.group(1)}, which was not built")
            continue
        page = browser_context.new_page()
        failed, script_errors, bad_status = [], [], []
        page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
        page.on("pageerror", lambda e: script_errors.append(str(e)))
        page.on("response", lambda r: bad_status.append(f"{r.url} -> {r.status}") if r.status >= 400 else None)
        before = len(browser_context.outside_requests)
        page.goto(url, wait_until="load", timeout=60_000)
        report = page.evaluate(PAGE_REPORT_JS)
        if report["widgetViews"]:
            page.wait_for_timeout(1000)  # the widget manager renders asynchronously
            report = page.evaluate(PAGE_REPORT_JS)
        full_page_png(browser_context, page, SCREENSHOTS / (rel.replace("/", "__") + ".png"))
        page.close()

        outside = browser_context.outside_requests[before:]
        mine = []
        if outside:
            mine.append(f"requests outside the book: {outside}")
        if failed:
            mine.append(f"failed requests: {failed}")
        if bad_status:
            mine.append(f"HTTP errors: {bad_status}")
        if script_errors:
            mine.append(f"script errors: {script_errors}")
        if report["mathNodes"]:
            math_pages += 1
            if not report["mathJaxLoaded"]:
                mine.append("the page has maths but MathJax did not load")
            elif report["typeset"] < report["mathNodes"] or report["untypeset"]:
                mine.append(f"{report['mathNodes']} maths nodes, only {report['typeset']} typeset; "
                            f"left as TeX: {report['untypeset']}")
        if report["mathErrors"]:
            mine.append(f"MathJax errors: {report['mathErrors']}")
        if report["rawTex"]:
            mine.append(f"raw TeX left in the text: {report['rawTex']}")
        if report["brokenImages"]:
            mine.append(f"images that did not load: {report['brokenImages']}")
        if report["widgetViews"] and not report["widgetsRendered"]:
            mine.append(f"{report['widgetViews']} widgets on the page, none rendered")
        if report["errorOutputs"]:
            mine.append(f"error/stderr output cells: {report['errorOutputs']}")
        problems.extend(f"{rel}: {p}" for p in mine)
    assert not problems, "\n".join(problems)
    assert math_pages >= 1, "no page with maths was checked (the notation page has some)"
    assert len(list(SCREENSHOTS.glob("*.png"))) == len(pages) - sum(
        bool(REDIRECT.search(p.read_text(encoding="utf-8"))) for p in pages)


WIDGET_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<script src="_static/vendor/require.js"></script>
<script src="_static/vendor/html-manager/embed-amd.js"></script>
<script type="application/vnd.jupyter.widget-state+json">{state}</script>
</head><body>
<p>widget check</p>
<script type="application/vnd.jupyter.widget-view+json">{view}</script>
</body></html>
"""


def test_widget_manager_renders_offline(built_book, playwright, tmp_path):
    """The book's own require.js + ipywidgets HTML manager render a widget with no network.

    The chapters show explorers as static figures in the HTML, so the book's pages
    may carry no widget; this page embeds one the way myst-nb does (widget state in
    the head, a view where the output was) and loads the libraries from the built
    book's ``_static/vendor``.
    """
    ipywidgets = pytest.importorskip("ipywidgets")
    from ipywidgets.embed import embed_data

    slider = ipywidgets.IntSlider(value=7, min=1, max=8, description="num_heads")
    data = embed_data(views=[slider])
    site = tmp_path / "site"
    (site / "_static").mkdir(parents=True)
    (site / "_static" / "vendor").symlink_to(built_book / "_static" / "vendor")
    (site / "widget.html").write_text(WIDGET_PAGE.format(
        state=json.dumps(data["manager_state"]), view=json.dumps(data["view_specs"][0])))
    with _serve(site) as url, _offline_chromium(playwright, url, tmp_path / "profile") as context:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/widget.html", wait_until="load")
        page.wait_for_selector(".widget-slider", timeout=30_000)
        label = page.inner_text(".widget-label")
        readout = page.inner_text(".widget-readout")
        page.screenshot(path=str(tmp_path / "widget.png"))
        page.close()
        assert context.outside_requests == []
    assert errors == []
    assert label.strip() == "num_heads" and readout.strip() == "7"
