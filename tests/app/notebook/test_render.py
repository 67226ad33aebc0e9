"""Features of the one markdown pipeline (app.notebook.render): headings and the table of
contents, footnotes, tables, task lists, code, the plain text it extracts, embeds inserted
after sanitizing, and robustness. Links and tags are in test_render_links.py, hostile input
in test_sanitizer.py."""

import dataclasses
import re
import threading

from app.notebook import render
from tests.helpers import Elements, anchors

# --- structure ----------------------------------------------------------------------


def test_toc_and_heading_ids():
    r = render.render("# Working Notes\n\ntext\n\n## Experiments\n\n### Détails\n")
    ids = [attrs["id"] for t, attrs, _ in Elements(r.html).found if t in ("h1", "h2", "h3")]
    assert ids == ["h-working-notes", "h-experiments", "h-détails"]
    permalinks = [attrs["href"] for attrs, _ in anchors(r.html, "headerlink")]
    assert permalinks == ["#h-working-notes", "#h-experiments", "#h-détails"]
    toc = Elements(r.toc_html)
    assert toc.all("div", "toc")
    assert [(a["href"], text) for a, text in toc.all("a")] == [
        ("#h-working-notes", "Working Notes"),
        ("#h-experiments", "Experiments"),
        ("#h-détails", "Détails"),
    ]


def test_toc_empty_with_one_heading():
    assert render.render("# Only one\n\ntext").toc_html == ""
    assert render.render("no headings").toc_html == ""


def test_toc_marker_does_not_inline_a_toc():
    r = render.render("[TOC]\n\n# A\n\n# B")
    assert 'class="toc"' not in r.html


def test_footnotes():
    r = render.render("Claim.[^1]\n\n[^1]: The source.")
    els = Elements(r.html)
    [(ref, _)] = els.all("sup")
    assert ref["id"] == "fnref:1"
    [(attrs, text)] = els.all("a", "footnote-ref")
    assert attrs["href"] == "#fn:1" and text == "1"
    assert els.all("div", "footnote")
    assert [a["id"] for a, _ in els.all("li")] == ["fn:1"]
    assert anchors(r.html, "footnote-backref")[0][0]["href"] == "#fnref:1"
    assert r.text == "Claim.\nThe source."


def test_tables_use_align_attributes_not_styles():
    r = render.render("| a | b | c |\n|:--|:-:|--:|\n| 1 | 2 | 3 |\n")
    els = Elements(r.html)
    assert els.all("table")
    assert [a.get("align") for a, _ in els.all("th")] == ["left", "center", "right"]
    assert [text for _, text in els.all("td")] == ["1", "2", "3"]
    assert "style" not in r.html


def test_task_list():
    r = render.render("- [ ] open\n- [x] done\n- plain")
    els = Elements(r.html)
    assert els.all("ul", "task-list")
    assert len(els.all("li", "task-list-item")) == 2
    boxes = [a for a, _ in els.all("input")]
    assert len(boxes) == 2
    assert all(b["type"] == "checkbox" and "disabled" in b for b in boxes)
    assert ["checked" in b for b in boxes] == [False, True]


def test_admonition():
    r = render.render('!!! warning "Mind the gap"\n    Body *text*.\n')
    els = Elements(r.html)
    [(div, _)] = els.all("div", "admonition")
    assert div["class"] == "admonition warning"
    [(_, title)] = els.all("p", "admonition-title")
    assert title == "Mind the gap"
    assert els.all("em")


def test_sane_lists_keep_list_types_apart():
    r = render.render("1. one\n2. two\n\n* a\n* b\n\n3. three\n4. four")
    els = Elements(r.html)
    assert len(els.all("ol")) == 2 and len(els.all("ul")) == 1
    assert els.all("ol")[1][0]["start"] == "3"


def test_highlighted_code_uses_classes():
    r = render.render("```python\ndef f():\n    return 1\n```")
    els = Elements(r.html)
    assert els.all("div", "highlight")
    assert els.all("span", "k")  # keyword
    assert els.all("span", "nf")  # function name
    assert "style=" not in r.html


def test_unknown_language_is_still_a_code_block():
    r = render.render("```nosuchlang\n<b>x</b>\n```")
    els = Elements(r.html)
    assert els.all("div", "highlight") and els.all("pre")
    assert not els.all("b")
    assert "&lt;b&gt;x&lt;/b&gt;" in r.html


def test_pygments_css_light_and_dark():
    css = render.pygments_css()
    light, _, dark = css.partition("@media (prefers-color-scheme: dark)")
    assert ".highlight .k " in light and ".highlight .k " in dark
    assert "pre {" not in css  # does not restyle every <pre> on the page


def test_safe_raw_html_passes_through():
    body = (
        "Press <kbd>Ctrl</kbd>+<kbd>C</kbd>, x<sup>2</sup>.\n\n"
        "<details><summary>More</summary>Hidden</details>"
    )
    els = Elements(render.render(body).html)
    assert [t for _, t in els.all("kbd")] == ["Ctrl", "C"]
    assert els.all("sup") and els.all("details") and els.all("summary")


def test_images_keep_http_and_relative_sources():
    r = render.render('![a](https://example.com/a.png) ![b](/static/b.png "B")')
    assert [a["src"] for a, _ in Elements(r.html).all("img")] == [
        "https://example.com/a.png",
        "/static/b.png",
    ]


# --- plain text ---------------------------------------------------------------------


def test_text_is_plain():
    body = (
        "# Title\n\nSome *emphasis*, a [link](http://x.org) and &amp; entity.\n\n"
        "- one\n- two\n\n```python\nprint('hi')\n```\n\n<div>raw <b>html</b></div>"
    )
    r = render.render(body)
    assert r.text == ("Title\nSome emphasis, a link and & entity.\none\ntwo\nprint('hi')\nraw html")


# --- embeds -------------------------------------------------------------------------


SVG = '<svg viewBox="0 0 1 1"><rect width="1" height="1"/></svg>'


def test_embed_output_is_inserted_after_sanitizing():
    seen: list[str] = []

    def card(source: str) -> str:
        seen.append(source)
        return f'<figure class="run-card">{SVG}</figure>'

    r = render.render("Before.\n\n```run\nid: 42\n```\n\nAfter.", embeds={"run": card})
    assert seen == ["id: 42\n"]
    assert f'<figure class="run-card">{SVG}</figure>' in r.html
    assert "CPEMBED" not in r.html and "CPEMBED" not in r.text
    assert r.text == "Before.\nAfter."
    assert r.html.index("Before.") < r.html.index("run-card") < r.html.index("After.")


def test_several_embeds_in_order():
    r = render.render(
        "```run\nid: 1\n```\n\n```run\nid: 2\n```\n",
        embeds={"run": lambda s: f"<div>{s.strip()}</div>"},
    )
    assert r.html.index("<div>id: 1</div>") < r.html.index("<div>id: 2</div>")


def test_raising_embed_shows_escaped_error():
    def broken(source: str) -> str:
        raise ValueError("no run <script>alert(1)</script>")

    r = render.render("```run\nid: 9\n```\n\nstill here", embeds={"run": broken})
    els = Elements(r.html)
    [(_, message)] = els.all("div", "embed-error")
    assert "ValueError" in message and "no run <script>" in message
    assert not els.all("script")
    assert "still here" in r.html


def test_forged_placeholders_stay_text():
    forged = "CPEMBED0123456789abcdef0123456789abcdefI0E CPEMBEDI0E <p>CPEMBED00I0E</p>"
    r = render.render(forged + "\n\n```run\nid: 1\n```", embeds={"run": lambda s: SVG})
    assert r.html.count("<svg") == 1
    assert "CPEMBED0123456789abcdef0123456789abcdefI0E" in r.html


def test_unregistered_info_string_is_code():
    r = render.render("```run\nid: 42\n```", embeds={"chart": lambda s: SVG})
    assert "<svg" not in r.html
    assert Elements(r.html).all("div", "highlight")
    assert "id: 42" in r.text


def test_no_embeds_means_code():
    r = render.render("```run\nid: 42\n```")
    assert Elements(r.html).all("pre")


def test_embed_fence_inside_a_longer_fence_is_code():
    body = "````markdown\n```run\nid: 1\n```\n````"
    r = render.render(body, embeds={"run": lambda s: SVG})
    assert "<svg" not in r.html
    assert "```run" in r.text


# --- robustness ---------------------------------------------------------------------


def test_markdown_stash_placeholders_cannot_be_forged():
    r = render.render("\x02klzzwxh:0000\x03 <b>x</b> \x02wzxhzdk:0\x03")
    assert "klzzwxh" in r.html and "\x02" not in r.html


def test_concurrent_renders_are_independent():
    # each thread reuses one Markdown instance: nothing of one note may reach another
    bodies = [f"# Note {i}\n\n## Part\n\n[[Link {i}]] #tag{i} footnote[^{i}]\n\n"
              f"- [{'x' if i % 2 else ' '}] task {i}\n\n```python\nx = {i}\n```\n\n"
              f"[^{i}]: note {i}" for i in range(24)]
    expected = [render.render(b) for b in bodies]
    results: dict[int, list[render.Rendered]] = {i: [] for i in range(len(bodies))}

    def work(i: int) -> None:
        for k in range(5):
            results[i].append(render.render(bodies[(i + k) % len(bodies)]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, got in results.items():
        assert [_canonical(r) for r in got] == \
            [_canonical(expected[(i + k) % len(bodies)]) for k in range(5)]


_ATTR_RE = re.compile(r'\s([\w-]+)(?:="([^"]*)")?')
_TAG_RE = re.compile(r"<(\w+)(\s[^>]*)?>")


def _canonical(r: render.Rendered) -> render.Rendered:
    """nh3 writes a tag's attributes in no fixed order (`disabled="" type="checkbox"` one
    time, `type="checkbox" disabled=""` the next): compare them sorted."""
    def tag(m: re.Match[str]) -> str:
        attrs = sorted(_ATTR_RE.findall(m.group(2) or ""))
        return "<" + m.group(1) + "".join(f' {k}="{v}"' for k, v in attrs) + ">"
    return dataclasses.replace(r, html=_TAG_RE.sub(tag, r.html))


def test_a_reused_renderer_forgets_the_previous_note():
    first = render.render("# A\n\n## B\n\ntext[^1]\n\n[^1]: the first note's footnote")
    assert "the first note" in first.html and first.toc_html
    second = render.render("plain words, no headings")
    assert "footnote" not in second.html and second.toc_html == ""
    assert second.links == [] and second.tags == [] and second.tasks == []


def test_an_embed_may_render_markdown_while_its_note_renders():
    def inner(source: str) -> str:
        return render.render(f"**{source.strip()}** [[Inner]] #inner").html

    outer = render.render("[[Outer]] #outer\n\n```card\nbold\n```\n\nafter",
                          embeds={"card": inner})
    assert "<strong>bold</strong>" in outer.html and "after" in outer.html
    assert [link.target for link in outer.links] == ["Outer"] and outer.tags == ["outer"]
    again = render.render("[[Outer]] #outer")  # the thread's renderer is intact after it
    assert [link.target for link in again.links] == ["Outer"]


def test_fifty_kilobyte_note_renders_whole():
    section = (
        "## Section [[Link]] #tag\n\nSome *text* with `code`, a [link](https://x.org) "
        "and more words to fill the line.[^f]\n\n```python\nx = [i * i for i in range(9)]\n```"
        "\n\n- item [[Other]]\n- [ ] task\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    )
    body = section * (50_000 // len(section) + 1) + "[^f]: note\n"
    assert len(body) >= 50_000
    r = render.render(body)
    assert [link.target for link in r.links] == ["Link", "Other"]
    assert r.html.count("<h2") == body.count("## Section")


def test_a_list_right_after_a_paragraph_is_a_list():
    els = Elements(render.render("Steps:\n- one\n- two\n\nThen:\n1. first\n2. second").html)
    assert [text for _, text in els.all("p")] == ["Steps:", "Then:"]
    assert [text for _, text in els.all("li")] == ["one", "two", "first", "second"]
    # as in CommonMark: only a list starting at 1 interrupts, and "-x" is no item
    for text in ("The number is\n14. the answer", "a\n-x", "a|b\n- c"):
        assert "<li>" not in render.render(text).html, text


def test_fenced_code_inside_a_list_item_or_a_quote_is_code():
    for source in ("1. install\n    ```bash\n    pip install x\n    ```\n2. run",
                   "- install\n\n    ```bash\n    pip install x\n    ```\n\n- run",
                   "> ```bash\n> pip install x\n> ```\n> said the readme"):
        els = Elements(render.render(source).html)
        assert [text for _, text in els.all("code")] == ["pip install x\n"], source
        assert "```" not in render.render(source).html, source


def test_a_fence_with_a_wordy_info_string_is_code_and_closes():
    """"```plain text" opens a block (CommonMark's language is the info string's first
    word); its closing line must not open another that swallows the rest of the note."""
    r = render.render("```plain text\nshow group count\n```\n\nAfter [[Limiting#Limit|it]].\n\n"
                      "````md\n```js a b\nkept as written\n```\n````\n\nend")
    assert r.html.count("<pre>") == 2
    assert "show group count" in r.html and [link.target for link in r.links] == ["Limiting"]
    assert "```js a b" in re.sub(r"<[^>]+>", "", r.html)  # the inner fence, as written
    assert r.html.rstrip().endswith("<p>end</p>")
