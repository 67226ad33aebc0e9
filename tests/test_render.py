"""Features of the one markdown pipeline (app.render)."""

import threading
from html.parser import HTMLParser

import pytest

from app.notebook.render import Rendered, WikiLink, pygments_css, render

EXISTING = {"Some Title", "2024-W13", "2024-03-31"}


def resolver(target: str) -> tuple[str, bool]:
    if target in EXISTING:
        return "/e/" + target.replace(" ", "-"), True
    return "/new?title=" + target.replace(" ", "+"), False


class Elements(HTMLParser):
    """Every start tag of a fragment, as (tag, attrs, text inside)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.open: list[list[str]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        text: list[str] = []
        self.found.append((tag, dict(attrs), text))
        if tag not in ("br", "hr", "img", "input", "wbr"):
            self.open.append(text)

    def handle_endtag(self, tag):
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        for text in self.open:
            text.append(data)

    def all(self, tag: str, cls: str | None = None):
        return [
            (attrs, "".join(text))
            for t, attrs, text in self.found
            if t == tag and (cls is None or cls in (attrs.get("class") or "").split())
        ]


def anchors(html: str, cls: str):
    return Elements(html).all("a", cls)


# --- wiki links -------------------------------------------------------------------


def test_existing_wikilink():
    r = render("See [[Some Title]] now.", resolve_link=resolver)
    assert isinstance(r, Rendered)
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert attrs["class"] == "wikilink"
    assert attrs["href"] == "/e/Some-Title"
    assert attrs["rel"] == "noopener noreferrer"
    assert text == "Some Title"
    assert r.links == [WikiLink("Some Title", "Some Title", "See Some Title now.")]


def test_missing_wikilink_gets_create_url():
    r = render("[[Nowhere Yet]]", resolve_link=resolver)
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert attrs["class"] == "wikilink missing"
    assert attrs["href"] == "/new?title=Nowhere+Yet"
    assert text == "Nowhere Yet"


def test_alias_is_display_text():
    r = render("Read [[Some Title|the long essay]].", resolve_link=resolver)
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert text == "the long essay"
    assert r.links == [WikiLink("Some Title", "the long essay", "Read the long essay.")]


def test_empty_alias_falls_back_to_target():
    r = render("[[Some Title|]]", resolve_link=resolver)
    assert r.links[0].text == "Some Title"


def test_week_and_date_targets():
    r = render("Last [[2024-w13]] and [[2024-03-31]].", resolve_link=resolver)
    assert [link.target for link in r.links] == ["2024-W13", "2024-03-31"]
    hrefs = [attrs["href"] for attrs, _ in anchors(r.html, "wikilink")]
    assert hrefs == ["/e/2024-W13", "/e/2024-03-31"]
    assert all(a["class"] == "wikilink" for a, _ in anchors(r.html, "wikilink"))


def test_target_whitespace_is_normalised():
    r = render("[[  Some \t  Title ]]", resolve_link=resolver)
    assert r.links[0].target == "Some Title"


def test_default_resolver_points_at_search():
    r = render("[[A & B/C?]]")
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert attrs["href"] == "/search?q=A%20%26%20B%2FC%3F"
    assert attrs["class"] == "wikilink missing"
    assert text == "A & B/C?"


def test_resolver_called_once_per_target():
    calls: list[str] = []

    def counting(target):
        calls.append(target)
        return resolver(target)

    render("[[X]] [[X]] [[Y]] [[X|again]]", resolve_link=counting)
    assert sorted(calls) == ["X", "Y"]


@pytest.mark.parametrize(
    "body",
    [
        "`[[Inline Code]]`",
        "```\n[[Fenced]]\n```",
        "```python\nx = '[[Fenced Python]]'\n```",
        "    [[Indented Code]]",
        "\\[[Escaped]]",
        "[[]]",
        "[[ ]]",
        "[[broken\nacross lines]]",
    ],
)
def test_no_wikilink(body):
    r = render(body, resolve_link=resolver)
    assert r.links == []
    assert anchors(r.html, "wikilink") == []


def test_wikilink_inside_markdown_link_stays_text():
    r = render("[see [[X]]](https://example.com)")
    assert r.links == []
    [(attrs, text)] = Elements(r.html).all("a")
    assert attrs["href"] == "https://example.com" and text == "see [[X]]"


def test_links_document_order_dedup_and_context():
    body = (
        "- [[Alpha]] top item\n"
        "    - [[Beta]] nested item\n"
        "- [[Alpha]] again\n\n"
        "> quoted [[Gamma|g]]\n\n"
        "Body with a note.[^n]\n\n"
        "[^n]: Footnote about [[Delta]].\n\n"
        "| col |\n|-----|\n| cell [[Epsilon]] |\n"
    )
    r = render(body, resolve_link=resolver)
    assert [(link.target, link.text, link.context) for link in r.links] == [
        ("Alpha", "Alpha", "Alpha top item"),
        ("Beta", "Beta", "Beta nested item"),
        ("Gamma", "g", "quoted g"),
        ("Epsilon", "Epsilon", "cell Epsilon"),
        ("Delta", "Delta", "Footnote about Delta."),  # footnotes render at the end
    ]


def test_context_is_plain_text_of_the_paragraph():
    r = render("Some **bold** and `code` and <kbd>Ctrl</kbd> near [[Target]] #tag.")
    assert r.links[0].context == "Some bold and code and Ctrl near Target #tag."


def test_context_is_trimmed_around_the_link():
    before = " ".join(f"before{i}" for i in range(100))
    after = " ".join(f"after{i}" for i in range(100))
    r = render(f"{before} [[Middle Link]] {after}")
    context = r.links[0].context
    assert "Middle Link" in context
    assert 200 <= len(context) <= 250
    assert context.startswith("…") and context.endswith("…")
    head, _, tail = context.partition("Middle Link")
    assert abs(len(head) - len(tail)) < 20  # centred
    assert "before99" in head and "after0" in tail
    assert not any(w.startswith("efore") for w in head.split())  # cut at words


def test_hostile_alias_and_target_are_escaped():
    r = render('[[x" onclick="alert(1)|<img src=x onerror=alert(1)>]]')
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert set(attrs) == {"class", "href", "rel"}
    assert text == "<img src=x onerror=alert(1)>"
    assert "<img" not in r.html
    assert r.links[0].target == 'x" onclick="alert(1)'


# --- tags --------------------------------------------------------------------------


def test_tags_rendered_and_collected():
    r = render("#start of a line, then #Middle, (#paren) and #a/b-c_d.\n\n- item #Start")
    assert r.tags == ["start", "middle", "paren", "a/b-c_d"]
    hrefs = [attrs["href"] for attrs, _ in anchors(r.html, "tag")]
    assert hrefs == ["/tags/start", "/tags/middle", "/tags/paren", "/tags/a/b-c_d", "/tags/start"]
    texts = [text for _, text in anchors(r.html, "tag")]
    assert texts == ["#start", "#Middle", "#paren", "#a/b-c_d", "#Start"]


def test_tag_url_callable_gets_lowercased_tag():
    r = render("#Work", tag_url=lambda tag: f"/t?name={tag}")
    [(attrs, text)] = anchors(r.html, "tag")
    assert attrs["href"] == "/t?name=work" and text == "#Work"


def test_line_leading_tag_is_not_a_heading():
    r = render("#idea worth keeping")
    assert "<h1" not in r.html
    assert r.tags == ["idea"]


@pytest.mark.parametrize(
    "body",
    [
        "# Heading",
        "## Heading two ##",
        "C#sharp and a#b",
        "#123 #_under #-dash",
        "http://example.com/#frag and https://x.org/a#b",
        "<https://example.com/#auto>",
        "[link](https://example.com/#frag)",
        "[#inlink](https://example.com/)",
        "it&#39;s &#x27;quoted&#x27;",
        "`#incode`",
        "```\n#infence\n```",
        "    #indented code",
        '<span title=" #attr">x</span>',
        "\\#escaped",
    ],
)
def test_not_tags(body):
    r = render(body)
    assert r.tags == []
    assert anchors(r.html, "tag") == []


def test_trailing_punctuation_is_not_part_of_tag():
    assert render("done #today. and #now, #x/ #y-").tags == ["today", "now", "x", "y"]


# --- structure ---------------------------------------------------------------------


def test_toc_and_heading_ids():
    r = render("# Working Notes\n\ntext\n\n## Experiments\n\n### Détails\n")
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
    assert render("# Only one\n\ntext").toc_html == ""
    assert render("no headings").toc_html == ""


def test_toc_marker_does_not_inline_a_toc():
    r = render("[TOC]\n\n# A\n\n# B")
    assert 'class="toc"' not in r.html


def test_footnotes():
    r = render("Claim.[^1]\n\n[^1]: The source.")
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
    r = render("| a | b | c |\n|:--|:-:|--:|\n| 1 | 2 | 3 |\n")
    els = Elements(r.html)
    assert els.all("table")
    assert [a.get("align") for a, _ in els.all("th")] == ["left", "center", "right"]
    assert [text for _, text in els.all("td")] == ["1", "2", "3"]
    assert "style" not in r.html


def test_task_list():
    r = render("- [ ] open\n- [x] done\n- plain")
    els = Elements(r.html)
    assert els.all("ul", "task-list")
    assert len(els.all("li", "task-list-item")) == 2
    boxes = [a for a, _ in els.all("input")]
    assert len(boxes) == 2
    assert all(b["type"] == "checkbox" and "disabled" in b for b in boxes)
    assert ["checked" in b for b in boxes] == [False, True]


def test_admonition():
    r = render('!!! warning "Mind the gap"\n    Body *text*.\n')
    els = Elements(r.html)
    [(div, _)] = els.all("div", "admonition")
    assert div["class"] == "admonition warning"
    [(_, title)] = els.all("p", "admonition-title")
    assert title == "Mind the gap"
    assert els.all("em")


def test_sane_lists_keep_list_types_apart():
    r = render("1. one\n2. two\n\n* a\n* b\n\n3. three\n4. four")
    els = Elements(r.html)
    assert len(els.all("ol")) == 2 and len(els.all("ul")) == 1
    assert els.all("ol")[1][0]["start"] == "3"


def test_highlighted_code_uses_classes():
    r = render("```python\ndef f():\n    return 1\n```")
    els = Elements(r.html)
    assert els.all("div", "highlight")
    assert els.all("span", "k")  # keyword
    assert els.all("span", "nf")  # function name
    assert "style=" not in r.html


def test_unknown_language_is_still_a_code_block():
    r = render("```nosuchlang\n<b>x</b>\n```")
    els = Elements(r.html)
    assert els.all("div", "highlight") and els.all("pre")
    assert not els.all("b")
    assert "&lt;b&gt;x&lt;/b&gt;" in r.html


def test_pygments_css_light_and_dark():
    css = pygments_css()
    light, _, dark = css.partition("@media (prefers-color-scheme: dark)")
    assert ".highlight .k " in light and ".highlight .k " in dark
    assert "pre {" not in css  # does not restyle every <pre> on the page


def test_safe_raw_html_passes_through():
    body = (
        "Press <kbd>Ctrl</kbd>+<kbd>C</kbd>, x<sup>2</sup>.\n\n"
        "<details><summary>More</summary>Hidden</details>"
    )
    els = Elements(render(body).html)
    assert [t for _, t in els.all("kbd")] == ["Ctrl", "C"]
    assert els.all("sup") and els.all("details") and els.all("summary")


def test_images_keep_http_and_relative_sources():
    r = render('![a](https://example.com/a.png) ![b](/static/b.png "B")')
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
    r = render(body)
    assert r.text == ("Title\nSome emphasis, a link and & entity.\none\ntwo\nprint('hi')\nraw html")


# --- embeds -------------------------------------------------------------------------

SVG = '<svg viewBox="0 0 1 1"><rect width="1" height="1"/></svg>'


def test_embed_output_is_inserted_after_sanitizing():
    seen: list[str] = []

    def card(source: str) -> str:
        seen.append(source)
        return f'<figure class="run-card">{SVG}</figure>'

    r = render("Before.\n\n```run\nid: 42\n```\n\nAfter.", embeds={"run": card})
    assert seen == ["id: 42\n"]
    assert f'<figure class="run-card">{SVG}</figure>' in r.html
    assert "CPEMBED" not in r.html and "CPEMBED" not in r.text
    assert r.text == "Before.\nAfter."
    assert r.html.index("Before.") < r.html.index("run-card") < r.html.index("After.")


def test_several_embeds_in_order():
    r = render(
        "```run\nid: 1\n```\n\n```run\nid: 2\n```\n",
        embeds={"run": lambda s: f"<div>{s.strip()}</div>"},
    )
    assert r.html.index("<div>id: 1</div>") < r.html.index("<div>id: 2</div>")


def test_raising_embed_shows_escaped_error():
    def broken(source: str) -> str:
        raise ValueError("no run <script>alert(1)</script>")

    r = render("```run\nid: 9\n```\n\nstill here", embeds={"run": broken})
    els = Elements(r.html)
    [(_, message)] = els.all("div", "embed-error")
    assert "ValueError" in message and "no run <script>" in message
    assert not els.all("script")
    assert "still here" in r.html


def test_forged_placeholders_stay_text():
    forged = "CPEMBED0123456789abcdef0123456789abcdefI0E CPEMBEDI0E <p>CPEMBED00I0E</p>"
    r = render(forged + "\n\n```run\nid: 1\n```", embeds={"run": lambda s: SVG})
    assert r.html.count("<svg") == 1
    assert "CPEMBED0123456789abcdef0123456789abcdefI0E" in r.html


def test_unregistered_info_string_is_code():
    r = render("```run\nid: 42\n```", embeds={"chart": lambda s: SVG})
    assert "<svg" not in r.html
    assert Elements(r.html).all("div", "highlight")
    assert "id: 42" in r.text


def test_no_embeds_means_code():
    r = render("```run\nid: 42\n```")
    assert Elements(r.html).all("pre")


def test_embed_fence_inside_a_longer_fence_is_code():
    body = "````markdown\n```run\nid: 1\n```\n````"
    r = render(body, embeds={"run": lambda s: SVG})
    assert "<svg" not in r.html
    assert "```run" in r.text


# --- robustness ---------------------------------------------------------------------


def test_markdown_stash_placeholders_cannot_be_forged():
    r = render("\x02klzzwxh:0000\x03 <b>x</b> \x02wzxhzdk:0\x03")
    assert "klzzwxh" in r.html and "\x02" not in r.html


def test_concurrent_renders_are_independent():
    bodies = [f"# Note {i}\n\n## Part\n\n[[Link {i}]] #tag{i}" for i in range(24)]
    expected = [render(b) for b in bodies]
    results: dict[int, Rendered] = {}

    def work(i: int) -> None:
        for _ in range(5):
            results[i] = render(bodies[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, exp in enumerate(expected):
        assert results[i] == exp


def test_fifty_kilobyte_note_renders_whole():
    section = (
        "## Section [[Link]] #tag\n\nSome *text* with `code`, a [link](https://x.org) "
        "and more words to fill the line.[^f]\n\n```python\nx = [i * i for i in range(9)]\n```"
        "\n\n- item [[Other]]\n- [ ] task\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    )
    body = section * (50_000 // len(section) + 1) + "[^f]: note\n"
    assert len(body) >= 50_000
    r = render(body)
    assert [link.target for link in r.links] == ["Link", "Other"]
    assert r.html.count("<h2") == body.count("## Section")
