"""What a note links to, as the one markdown pipeline (app.notebook.render) finds and
renders it: [[wiki links]] with their targets, aliases and context, and #tags."""

import pytest

from app.notebook import render
from tests.helpers import Elements, anchors

EXISTING = {"Some Title", "2024-W13", "2024-03-31"}


def resolver(target: str) -> tuple[str, bool]:
    if target in EXISTING:
        return "/e/" + target.replace(" ", "-"), True
    return "/new?title=" + target.replace(" ", "+"), False


# --- wiki links ---------------------------------------------------------------------


def test_existing_wikilink():
    r = render.render("See [[Some Title]] now.", resolve_link=resolver)
    assert isinstance(r, render.Rendered)
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert attrs["class"] == "wikilink"
    assert attrs["href"] == "/e/Some-Title"
    assert attrs["rel"] == "noopener noreferrer"
    assert text == "Some Title"
    assert r.links == [render.WikiLink("Some Title", "Some Title", "See Some Title now.")]


def test_missing_wikilink_gets_create_url():
    r = render.render("[[Nowhere Yet]]", resolve_link=resolver)
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert attrs["class"] == "wikilink missing"
    assert attrs["href"] == "/new?title=Nowhere+Yet"
    assert text == "Nowhere Yet"


def test_alias_is_display_text():
    r = render.render("Read [[Some Title|the long essay]].", resolve_link=resolver)
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert text == "the long essay"
    assert r.links == [render.WikiLink("Some Title", "the long essay", "Read the long essay.")]


def test_empty_alias_falls_back_to_target():
    r = render.render("[[Some Title|]]", resolve_link=resolver)
    assert r.links[0].text == "Some Title"


def test_week_and_date_targets():
    r = render.render("Last [[2024-w13]] and [[2024-03-31]].", resolve_link=resolver)
    assert [link.target for link in r.links] == ["2024-W13", "2024-03-31"]
    hrefs = [attrs["href"] for attrs, _ in anchors(r.html, "wikilink")]
    assert hrefs == ["/e/2024-W13", "/e/2024-03-31"]
    assert all(a["class"] == "wikilink" for a, _ in anchors(r.html, "wikilink"))


def test_target_whitespace_is_normalised():
    r = render.render("[[  Some \t  Title ]]", resolve_link=resolver)
    assert r.links[0].target == "Some Title"


def test_default_resolver_points_at_search():
    r = render.render("[[A & B/C?]]")
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert attrs["href"] == "/search?q=A%20%26%20B%2FC%3F"
    assert attrs["class"] == "wikilink missing"
    assert text == "A & B/C?"


def test_resolver_called_once_per_target():
    calls: list[str] = []

    def counting(target):
        calls.append(target)
        return resolver(target)

    render.render("[[X]] [[X]] [[Y]] [[X|again]]", resolve_link=counting)
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
    r = render.render(body, resolve_link=resolver)
    assert r.links == []
    assert anchors(r.html, "wikilink") == []


def test_wikilink_inside_markdown_link_stays_text():
    r = render.render("[see [[X]]](https://example.com)")
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
    r = render.render(body, resolve_link=resolver)
    assert [(link.target, link.text, link.context) for link in r.links] == [
        ("Alpha", "Alpha", "Alpha top item"),
        ("Beta", "Beta", "Beta nested item"),
        ("Gamma", "g", "quoted g"),
        ("Epsilon", "Epsilon", "cell Epsilon"),
        ("Delta", "Delta", "Footnote about Delta."),  # footnotes render at the end
    ]


def test_context_is_plain_text_of_the_paragraph():
    r = render.render("Some **bold** and `code` and <kbd>Ctrl</kbd> near [[Target]] #tag.")
    assert r.links[0].context == "Some bold and code and Ctrl near Target #tag."


def test_context_is_trimmed_around_the_link():
    before = " ".join(f"before{i}" for i in range(100))
    after = " ".join(f"after{i}" for i in range(100))
    r = render.render(f"{before} [[Middle Link]] {after}")
    context = r.links[0].context
    assert "Middle Link" in context
    assert 200 <= len(context) <= 250
    assert context.startswith("…") and context.endswith("…")
    head, _, tail = context.partition("Middle Link")
    assert abs(len(head) - len(tail)) < 20  # centred
    assert "before99" in head and "after0" in tail
    assert not any(w.startswith("efore") for w in head.split())  # cut at words


def test_hostile_alias_and_target_are_escaped():
    r = render.render('[[x" onclick="alert(1)|<img src=x onerror=alert(1)>]]')
    [(attrs, text)] = anchors(r.html, "wikilink")
    assert set(attrs) == {"class", "href", "rel"}
    assert text == "<img src=x onerror=alert(1)>"
    assert "<img" not in r.html
    assert r.links[0].target == 'x" onclick="alert(1)'


# --- tags ---------------------------------------------------------------------------


def test_tags_rendered_and_collected():
    r = render.render("#start of a line, then #Middle, (#paren) and #a/b-c_d.\n\n- item #Start")
    assert r.tags == ["start", "middle", "paren", "a/b-c_d"]
    hrefs = [attrs["href"] for attrs, _ in anchors(r.html, "tag")]
    assert hrefs == ["/tags/start", "/tags/middle", "/tags/paren", "/tags/a/b-c_d", "/tags/start"]
    texts = [text for _, text in anchors(r.html, "tag")]
    assert texts == ["#start", "#Middle", "#paren", "#a/b-c_d", "#Start"]


def test_tag_url_callable_gets_lowercased_tag():
    r = render.render("#Work", tag_url=lambda tag: f"/t?name={tag}")
    [(attrs, text)] = anchors(r.html, "tag")
    assert attrs["href"] == "/t?name=work" and text == "#Work"


def test_line_leading_tag_is_not_a_heading():
    r = render.render("#idea worth keeping")
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
    r = render.render(body)
    assert r.tags == []
    assert anchors(r.html, "tag") == []


def test_trailing_punctuation_is_not_part_of_tag():
    assert render.render("done #today. and #now, #x/ #y-").tags == ["today", "now", "x", "y"]
