"""Obsidian's markdown through the one pipeline (app.notebook.render): links to headings
and blocks, callouts, highlights, comments, nested tags and math (embeds:
tests/app/notebook/test_render_embeds.py)."""

from __future__ import annotations

import re

import pytest

from app.notebook import render
from app.notebook.render import sanitize
from app.notebook.render.callouts import TYPES
from tests.app.notebook.test_sanitizer import problems
from tests.helpers import Elements, anchors


class Resolver:
    """A resolve_link that remembers what it was asked."""

    def __init__(self, existing=("Note", "Folder/Note", "Other")):
        self.existing = set(existing)
        self.asked: list[str] = []

    def __call__(self, target: str) -> render.Resolved:
        self.asked.append(target)
        if target in self.existing:
            return render.Resolved("/e/" + target.replace(" ", "-"), True)
        return render.Resolved("/new?title=" + target, False)


def hrefs(html: str) -> list[str]:
    return [attrs["href"] for attrs, _ in anchors(html, "wikilink")]


# --- links to headings, blocks, folders ----------------------------------------------


def test_heading_link_lands_on_the_id_the_toc_gives_the_heading():
    target = render.render("# Intro\n\n## Pipeline bubbles: why?\n\ntext")
    [heading_id] = re.findall(r'<h2 id="([^"]+)"', target.html)
    resolve = Resolver()
    r = render.render("See [[Note#Pipeline bubbles: why?]].", resolve_link=resolve)
    assert hrefs(r.html) == [f"/e/Note#{heading_id}"]
    assert resolve.asked == ["Note"]
    assert r.links == [render.WikiLink("Note", "Note > Pipeline bubbles: why?",
                                       "See Note > Pipeline bubbles: why?.")]


def test_nested_heading_path_lands_on_the_last_heading():
    r = render.render("[[Note#Part#Sub part]]", resolve_link=Resolver())
    assert hrefs(r.html) == ["/e/Note#h-sub-part"]
    assert r.links[0].text == "Note > Part > Sub part"


def test_link_to_a_heading_of_this_note_is_an_anchor_and_no_backlink():
    resolve = Resolver()
    r = render.render("# Method\n\nback to [[#Method]] or [[#Method|the top]]",
                      resolve_link=resolve)
    [(attrs, text), (attrs2, text2)] = anchors(r.html, "wikilink")
    assert (attrs["href"], text) == ("#h-method", "Method")
    assert (attrs2["href"], text2) == ("#h-method", "the top")
    assert 'id="h-method"' in r.html
    assert r.links == [] and resolve.asked == []


@pytest.mark.parametrize("body, href, target, text", [
    ("[[Folder/Note]]", "/e/Folder/Note", "Folder/Note", "Folder/Note"),
    ("[[Note|shown]]", "/e/Note", "Note", "shown"),
    ("[[Folder/Note#Heading|text]]", "/e/Folder/Note#h-heading", "Folder/Note", "text"),
    ("[[Note#^abc-1]]", "/e/Note#b-abc-1", "Note", "Note > ^abc-1"),
    ("[[Note.md]]", "/e/Note", "Note", "Note"),
    ("[[ Other # Some  Heading ]]", "/e/Other#h-some-heading", "Other", "Other > Some  Heading"),
    ("[[Missing#Heading]]", "/new?title=Missing#h-heading", "Missing", "Missing > Heading"),
])  # fmt: skip
def test_link_forms_ask_for_the_page_and_record_it(body, href, target, text):
    resolve = Resolver()
    r = render.render(body, resolve_link=resolve)
    assert hrefs(r.html) == [href]
    assert resolve.asked == [target]
    assert [(link.target, link.text) for link in r.links] == [(target, text)]


def test_links_to_one_page_by_many_forms_are_one_backlink():
    r = render.render("[[Note]] [[Note#A]] [[Note#^b]] [[Note|x]]", resolve_link=Resolver())
    assert [link.target for link in r.links] == ["Note"]
    assert len(hrefs(r.html)) == 4


def test_a_bad_block_id_links_to_the_page():
    r = render.render("[[Note#^not ok!]]", resolve_link=Resolver())
    assert hrefs(r.html) == ["/e/Note"]


def test_link_to_a_file_goes_to_the_attachment_and_is_no_note_link():
    r = render.render("[[paper.pdf]] and [[gone.pdf]]", resolve_link=Resolver(),
                      resolve_attachment=lambda name: "/a/1/paper.pdf" if name == "paper.pdf"
                      else None)
    assert Elements(r.html).all("a")[0] == ({"href": "/a/1/paper.pdf",
                                              "rel": "noopener noreferrer"}, "paper.pdf")
    assert [link.target for link in r.links] == ["gone.pdf"]


# --- block ids --------------------------------------------------------------------------


def test_paragraph_and_list_item_ending_in_a_block_id_get_the_id_and_lose_the_mark():
    r = render.render("A claim worth citing. ^claim-1\n\n- first ^item1\n- second\n"
                      "    - nested ^deep\n")
    assert '<p id="b-claim-1">A claim worth citing.</p>' in r.html
    assert '<li id="b-item1">first</li>' in r.html
    assert re.search(r'<li id="b-deep">nested\s*</li>', r.html)
    assert "^" not in r.html and "^" not in r.text


def test_a_block_id_on_its_own_line_names_the_block_before():
    r = render.render("| a | b |\n|---|---|\n| 1 | 2 |\n\n^table-1\n\n- x\n- y\n\n^list-1\n")
    assert '<table id="b-table-1">' in r.html
    assert '<ul id="b-list-1">' in r.html
    assert "^" not in r.text


def test_a_caret_that_is_not_a_block_id_stays():
    r = render.render("2^10 is 1024 and x ^ y, also `code ^c`")
    assert 'id="' not in r.html
    assert "2^10" in r.text and "^ y" in r.text and "^c" in r.text


# --- callouts ---------------------------------------------------------------------------


@pytest.mark.parametrize("written, kind", sorted(TYPES.items()) + [("Whatever", "note")])
def test_callout_types_and_aliases(written, kind):
    r = render.render(f"> [!{written}]\n> body")
    [(attrs, text)] = Elements(r.html).all("div", "callout")
    assert attrs["class"] == f"callout callout-{kind}"
    title = Elements(r.html).all("p", "callout-title")
    assert title == [({"class": "callout-title"}, written.capitalize())]
    assert "[!" not in r.html


def test_callout_title_is_markdown_and_sanitized():
    r = render.render("> [!warning] Mind *the* gap <script>alert(1)</script>\n> body")
    assert '<p class="callout-title">Mind <em>the</em> gap' in r.html
    assert problems(r.html) == [] and "alert" not in r.html


def test_callout_title_after_a_no_break_space():
    r = render.render("> [!abstract]\u00a0**Further reading**: [[Note]]\n> body")
    assert Elements(r.html).all("p", "callout-title")[0][1] == "Further reading: Note"


def test_foldable_callouts_are_details():
    r = render.render("> [!tip]- Closed\n> hidden\n\n> [!faq]+ Open\n> shown")
    found = Elements(r.html).all("details", "callout")
    assert [(a["class"], "open" in a) for a, _ in found] == [("callout callout-tip", False),
                                                               ("callout callout-question", True)]
    assert Elements(r.html).all("summary", "callout-title")[0][1] == "Closed"


def test_consecutive_callouts_stay_separate_and_a_quote_after_one_is_a_quote():
    r = render.render("> [!note] One\n> a\n\n> [!tip] Two\n> b\n\n> plain quote\n\n> more quote")
    assert [a["class"] for a, _ in Elements(r.html).all("div", "callout")] == [
        "callout callout-note", "callout callout-tip"]
    assert len(Elements(r.html).all("blockquote")) == 1  # the two plain ones join, as before


def test_nested_callouts():
    r = render.render("> [!note] Outer\n> text\n> > [!bug] Inner\n> > inner text\n> back")
    assert re.search(r'<div class="callout callout-note">.*<div class="callout callout-bug">'
                     r".*inner text.*</div>.*</div>", r.html, re.S)


def test_callout_with_lists_and_links_inside():
    r = render.render("> [!example] Try\n>\n> - [[Note]]\n> - two\n", resolve_link=Resolver())
    assert "<li>" in r.html and hrefs(r.html) == ["/e/Note"]


# --- highlights, comments, tags -----------------------------------------------------------


def test_highlight_is_mark():
    r = render.render("a ==very *important*== point, but a == b stays")
    assert "<mark>very <em>important</em></mark>" in r.html
    assert "a == b stays" in r.text


def test_comments_are_gone_from_page_and_search_text():
    r = render.render("seen %%inline secret%% seen\n\n%%\nblock secret\n\nacross paragraphs\n%%\n"
                      "\nafter [[Note]] %%[[Hidden link]] #hiddentag%%", resolve_link=Resolver())
    assert "secret" not in r.html and "secret" not in r.text
    assert "across" not in r.text and "Hidden" not in r.html
    assert [link.target for link in r.links] == ["Note"] and r.tags == []
    assert "seen" in r.text and "after" in r.text


def test_comment_marks_in_code_and_unclosed_ones_stay():
    r = render.render("`%%kept%%`\n\n```\n%%also kept%%\n```\n\n100%% sure")
    assert "%%kept%%" in r.text and "%%also kept%%" in r.text and "100%% sure" in r.text


def test_nested_tags():
    r = render.render("#area/sub and #project/a-b/c")
    assert r.tags == ["area/sub", "project/a-b/c"]
    assert [a["href"] for a, _ in anchors(r.html, "tag")] == ["/tags/area/sub",
                                                               "/tags/project/a-b/c"]


# --- math -------------------------------------------------------------------------------


def maths(html: str) -> list[dict]:
    return [attrs for attrs, _ in Elements(html).all("math")]


def test_inline_and_display_math_are_mathml():
    r = render.render(r"Speed-up $S(p) = \frac{T_1}{T_p}$ and"
                      "\n\n$$\n\\sum_{i=1}^{n} x_i^2\n$$\n\nand $$E = mc^2$$ inline.")
    assert maths(r.html) == [{"display": "inline"}, {"display": "block"}, {"display": "block"}]
    assert "<mfrac>" in r.html and "<munderover>" in r.html
    assert "$" not in r.text
    assert problems(r.html) == []


def test_display_math_lines_are_not_markdown():
    r = render.render("$$\na\n= b\n- c\n# d\n$$")
    assert maths(r.html) == [{"display": "block"}]
    assert "<h1" not in r.html and "<li>" not in r.html


@pytest.mark.parametrize("body", [
    "It costs $5 and $6 at most.",
    "Between $ 1 and 2 $ nothing.",
    "From $5/$6 to $7.",
    r"Escaped \$x\$ dollars.",
    "`$x$` in code",
    "```\n$$x$$\n```",
])  # fmt: skip
def test_dollars_that_are_not_math(body):
    assert "<math" not in render.render(body).html


def test_latex_that_cannot_be_read_stays_as_written():
    r = render.render(r"bad $\frac{1}{$ here")
    assert "<math" not in r.html and r"\frac{1}{" in r.text


def test_latex_links_and_styles_do_not_come_through():
    r = render.render(r"$\href{javascript:alert(1)}{x}$ $\color{red}{y}$ $\style{x}{z}$")
    assert "href" not in r.html.replace('href="#', "")
    assert "javascript" not in r.html and "style=" not in r.html
    assert problems(r.html) == []


def test_raw_mathml_from_the_user_is_held_to_the_same_allowlist():
    r = render.render('<math><mrow href="javascript:alert(1)"><mi style="x" onclick="y">x</mi>'
                      '<mspace width="1em" height="url(x)"/></mrow>'
                      '<annotation-xml encoding="text/html"><img src=x onerror=alert(1)>'
                      "</annotation-xml></math><mi>outside</mi>")
    assert problems(r.html) == []
    assert "href" not in r.html and "style" not in r.html and "url(" not in r.html
    assert '<mspace width="1em">' in r.html


# --- the allowlist grew by exactly what these need -----------------------------------------


MATHML = {"math", "mrow", "mi", "mn", "mo", "mtext", "mspace", "mfrac", "msqrt", "mroot", "msub",
          "msup", "msubsup", "munder", "mover", "munderover", "mtable", "mtr", "mtd", "mstyle",
          "mpadded", "mphantom"}
OLD_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "dd", "del", "details",
    "dfn", "div", "dl", "dt", "em", "figcaption", "figure", "hr", "i", "img", "input", "ins",
    "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub",
    "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "time", "tr", "u", "ul",
    "var", "wbr", "h1", "h2", "h3", "h4", "h5", "h6",
}  # fmt: skip


def test_allowlist_adds_only_mathml_block_ids_and_obsidian_classes():
    assert sanitize.TAGS == OLD_TAGS | MATHML
    assert "math" not in sanitize.CLEAN_CONTENT_TAGS and "svg" in sanitize.CLEAN_CONTENT_TAGS
    for tag in ("p", "ul", "ol", "blockquote", "table"):
        assert "id" in sanitize.ATTRIBUTES[tag]
    assert sanitize.ATTRIBUTES["img"] == {"src", "alt", "title", "width", "height"}
    assert sanitize.ATTRIBUTES["a"] == {"href", "title", sanitize.MARKER_ATTR}
    every_math_attribute = set().union(*(sanitize.ATTRIBUTES[t] for t in MATHML))
    assert not every_math_attribute & {"href", "style", "src", "xlink:href", "class", "id"}
    assert sanitize.ALLOWED_CLASSES["details"] == sanitize.CALLOUT_CLASSES
    assert sanitize.ALLOWED_CLASSES["summary"] == {"callout-title"}


def test_user_ids_must_still_be_ours():
    r = render.render('<p id="log">x</p>\n\n<p id="b-ok">y</p>')
    assert 'id="log"' not in r.html and 'id="b-ok"' in r.html
