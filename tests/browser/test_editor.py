"""The editor and the rendered page in Chromium against the real server (`commonplace up`):
`[[` completes a title into a link, a task box ticks on the rendered page (with script and
without) and makes a revision, and an image pasted or dropped into a new entry uploads,
lands in the text as markdown, and survives the save."""

from __future__ import annotations

import base64
import re

import pytest
from playwright.sync_api import expect

from tests.browser.harness import (
    BROWSER,
    DEVICES,
    assert_fits,
    browser_context,
    call,
    chromium_page,
    hard_timeout,
)
from tests.browser.test_writing import tiny_png

pytestmark = BROWSER
TEST_SECONDS = 120  # a hard limit for one test, browser start included


@pytest.fixture(scope="module")
def live_server(module_server) -> str:
    """One server for the module: each test writes and reads entries of its own."""
    return module_server[0]


def test_double_bracket_completes_a_title_into_a_link(live_server):
    target = call(live_server, "POST", "/api/v1/entries",
                  {"title": "Ring all-reduce", "body": "Bandwidth.", "tags": ["comm"]})
    with hard_timeout(TEST_SECONDS), chromium_page("desktop") as (page, problems):
        page.goto(live_server + "/")
        page.keyboard.press("/")  # into search, and Esc back out of it
        assert page.evaluate("document.activeElement.id") == "site-search"
        assert page.get_attribute("#site-search", "placeholder") == "Search  ( / )"
        page.keyboard.press("Escape")
        assert page.evaluate("document.activeElement.id") != "site-search"
        page.keyboard.press("n")
        page.wait_for_url(re.compile(r"/entries/new$"))
        assert page.evaluate("document.activeElement.id") == "f-title"  # starts in the title
        page.keyboard.type("Notes on rings")
        page.focus("#f-body")
        page.keyboard.type("Compare with [[ring al")
        option = page.locator("#completions [role=option]").first
        option.wait_for()
        assert option.inner_text().startswith("Ring all-reduce")
        assert page.get_attribute("#f-body", "aria-activedescendant") == "completion-0"
        page.keyboard.press("Enter")
        assert page.input_value("#f-body") == "Compare with [[Ring all-reduce]]"
        assert page.locator("#completions").is_hidden()

        # A wide screen shows the text and its rendered preview side by side, kept current.
        assert page.locator("#f-body").is_visible() and page.locator("#preview").is_visible()
        expect(page.locator("#preview a.wikilink")).to_have_attribute("href", target["url"])

        page.keyboard.type(" and #co")
        page.locator("#completions [role=option]").first.wait_for()
        page.keyboard.press("Tab")
        assert page.input_value("#f-body").endswith("and #comm ")

        page.keyboard.press("Control+Enter")
        page.wait_for_url(re.compile(r"/entries/\d+/notes-on-rings$"))
        assert page.locator(".prose a.wikilink").get_attribute("href") == target["url"]
        assert problems == []


def test_ticking_a_task_on_the_page_makes_a_revision(live_server):
    with hard_timeout(TEST_SECONDS):
        for script in (True, False):
            tick_twice(live_server, script)


def tick_twice(base: str, script: bool) -> None:
    """Tick box 1, then untick box 2 from the page that the first tick left behind."""
    entry = call(base, "POST", "/api/v1/entries", {
        "title": f"Things to do {script}", "body": "- [ ] measure the ring\n- [x] read it"})
    with browser_context(java_script_enabled=script, **DEVICES["phone"]) as context:
        page = context.new_page()
        page.set_default_timeout(15_000)
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(base + entry["url"])
        assert_fits(page)
        box = page.get_by_role("checkbox", name="Task 1")
        assert box.get_attribute("aria-checked") == "false"
        box.tap()
        if not script:  # the form posts, and the page comes back at the box
            page.wait_for_url(re.compile(rf"#task-{entry['id']}-0$"))
        # With script it ticks in place. (A polling assertion from Python: the CSP forbids
        # the string eval that wait_for_function would need.)
        expect(page.get_by_role("checkbox", name="Task 1")).to_have_attribute(
            "aria-checked", "true")
        if script:
            assert page.url == base + entry["url"]
        saved = call(base, "GET", f"/api/v1/entries/{entry['id']}")
        assert saved["revision"] == 2
        assert saved["body"] == "- [x] measure the ring\n- [x] read it"

        page.get_by_role("checkbox", name="Task 2").tap()  # made from revision 2 now
        expected = "- [x] measure the ring\n- [ ] read it"
        for _ in range(50):
            saved = call(base, "GET", f"/api/v1/entries/{entry['id']}")
            if saved["body"] == expected:
                break
            page.wait_for_timeout(100)
        assert saved["body"] == expected and saved["revision"] == 3
        assert problems == []


PASTE = """([name, data]) => {
    const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
    const files = new DataTransfer();
    files.items.add(new File([bytes], name, {type: "image/png"}));
    const body = document.getElementById("f-body");
    const kind = name.startsWith("drop") ? "drop" : "paste";
    const event = kind === "drop"
        ? new DragEvent("drop", {dataTransfer: files, bubbles: true, cancelable: true})
        : new ClipboardEvent("paste", {clipboardData: files, bubbles: true, cancelable: true});
    body.dispatchEvent(event);
    return event.defaultPrevented;
}"""


def test_pasting_an_image_into_a_new_entry_uploads_it_and_inserts_markdown(module_server):
    live_server, data_dir = module_server  # the module's only uploads are this test's
    png = base64.b64encode(tiny_png()).decode()
    with hard_timeout(TEST_SECONDS), chromium_page("phone") as (page, problems):
        page.goto(live_server + "/entries/new")
        page.fill("#f-title", "Screenshot of the bubble")
        page.fill("#f-body", "Before the picture.\n")
        page.focus("#f-body")
        page.keyboard.press("Control+End")
        assert page.evaluate(PASTE, ["pasted.png", png]) is True
        # A new entry has no id: it is saved as a draft first, and the page becomes its editor.
        page.wait_for_url(re.compile(r"/entries/\d+/edit$"))
        expect(page.locator("#f-body")).to_have_value(
            re.compile(r"!\[pasted\.png\]\(/attachments/[0-9a-f]{64}/pasted\.png\)"))
        entry_id = int(re.search(r"/entries/(\d+)/edit", page.url)[1])
        assert call(live_server, "GET", f"/api/v1/entries/{entry_id}")["status"] == "draft"

        assert page.evaluate(PASTE, ["dropped.png", png]) is True  # a drop, now with an id
        expect(page.locator("#f-body")).to_have_value(re.compile(r"dropped\.png\)"))
        assert "Uploading" not in page.input_value("#f-body")

        page.get_by_role("button", name="Save", exact=True).tap()
        page.wait_for_url(re.compile(rf"/entries/{entry_id}/screenshot-of-the-bubble$"))
        assert page.locator(".prose img").count() == 2
        assert page.locator(".prose img").first.evaluate("i => i.complete && i.naturalWidth") == 1
        saved = call(live_server, "GET", f"/api/v1/entries/{entry_id}")
        assert saved["status"] == "published" and saved["body"].startswith("Before the picture.")
        assert problems == []
    assert len(list((data_dir / "attachments").rglob("*"))) >= 2
