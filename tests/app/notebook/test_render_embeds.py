"""Obsidian's embeds through the one pipeline (app.notebook.render): `![[image.png]]` from
attachments, `![[Note]]` framed from another note's HTML, and links and embeds read in one
pass however many a note has."""

from __future__ import annotations

import pytest
from markdown.treeprocessors import InlineProcessor

from app.notebook import render
from app.notebook.render import pipeline
from app.notebook.render.syntax import RenderState
from tests.app.notebook.test_render_obsidian import Resolver
from tests.app.notebook.test_sanitizer import problems
from tests.helpers import Elements, anchors

# --- embeds -----------------------------------------------------------------------------


FILES = {"image.png": "/attachments/aa/image.png", "Pasted image 1.png": "/attachments/bb/p.png",
         "slides.pdf": "/attachments/cc/slides.pdf"}


def images(html: str) -> list[dict]:
    return [attrs for attrs, _ in Elements(html).all("img")]


@pytest.mark.parametrize("body, size", [
    ("![[image.png]]", {}),
    ("![[image.png|100]]", {"width": "100"}),
    ("![[image.png|100x80]]", {"width": "100", "height": "80"}),
])  # fmt: skip
def test_image_embeds_are_images_from_attachments(body, size):
    r = render.render(body, resolve_attachment=FILES.get)
    assert images(r.html) == [{"src": "/attachments/aa/image.png", "alt": "image.png", **size}]
    assert "!" not in r.html and r.links == []


def test_image_name_with_spaces_and_alt_text():
    r = render.render("![[Pasted image 1.png|a diagram|300]]", resolve_attachment=FILES.get)
    assert images(r.html) == [{"src": "/attachments/bb/p.png", "alt": "a diagram",
                               "width": "300"}]


def test_missing_file_is_a_visible_mark_never_a_red_link():
    r = render.render("before ![[nowhere.png|100]] after", resolve_attachment=FILES.get)
    assert Elements(r.html).all("span", "missing-embed") == [({"class": "missing-embed"},
                                                              "nowhere.png")]
    assert "!" not in r.html and "wikilink" not in r.html and r.links == []
    # no resolver at all (a caller that knows no files): the same mark
    assert "missing-embed" in render.render("![[image.png]]").html


def test_other_files_embed_as_a_link_to_the_file():
    r = render.render("![[slides.pdf]]", resolve_attachment=FILES.get)
    assert Elements(r.html).all("a")[0][0]["href"] == "/attachments/cc/slides.pdf"


@pytest.mark.parametrize("body", [
    '![[image.png|100"onerror=alert(1)]]',
    "![[image.png|100 onerror=alert(1)]]",
    "![[image.png|1x1' onload='alert(1)]]",
    '![[image.png|<script>alert(1)</script>]]',
])  # fmt: skip
def test_size_or_alt_cannot_smuggle_attributes(body):
    r = render.render(body, resolve_attachment=FILES.get)
    [img] = images(r.html)
    assert set(img) <= {"src", "alt", "width", "height"} and "width" not in img
    assert problems(r.html) == []


def test_hostile_names_and_urls_from_the_resolver_give_no_script_url():
    echo = lambda name: name  # noqa: E731 - a careless resolver: the name is the URL
    r = render.render("![[javascript:alert(1).png]] ![[data:text/html,x.png]] "
                      "[[javascript:alert(1).pdf]]", resolve_attachment=echo)
    assert problems(r.html) == []
    assert "javascript" not in "".join(a.get("src") or "" for a in images(r.html))


NOTE_HTML = ('<h2 id="h-part">Part<a class="headerlink" href="#h-part">¶</a></h2>'
             '<p id="b-blk">quoted <a class="wikilink" href="/e/X">X</a></p>'
             '<div class="note-embed"><p class="note-embed-source"><a class="wikilink" '
             'href="/e/Deeper">Deeper</a></p><p>deeper text</p></div>'
             '<input type="checkbox" disabled data-task="0">')


def test_note_embed_is_framed_links_to_its_source_and_is_a_backlink():
    asked = []

    def embed(target, fragment):
        asked.append((target, fragment))
        return NOTE_HTML

    r = render.render("Intro.\n\n![[Other]]\n\nAfter.", resolve_link=Resolver(), embed_note=embed)
    assert asked == [("Other", None)]
    frame = r.html.split("<p>Intro.</p>\n")[1].split("\n<p>After.</p>")[0]
    assert frame.startswith('<div class="note-embed"><p class="note-embed-source">'
                            '<a class="wikilink" href="/e/Other"')
    assert "quoted" in frame
    # one level deep: the embed inside the embedded note is a link to it, nothing more
    assert "Deeper" in frame and "deeper text" not in frame
    # its ids, permalinks and task numbers would clash with the page's own
    assert 'id="' not in frame and "headerlink" not in frame and "data-task" not in frame
    assert [link.target for link in r.links] == ["Other"]
    assert "quoted" not in r.text and r.text == "Intro.\nAfter."


def test_section_embed_asks_for_the_fragment():
    asked = []
    r = render.render("![[Other#Part|see this]]", resolve_link=Resolver(),
                      embed_note=lambda t, f: asked.append((t, f)) or "<p>part</p>")
    assert asked == [("Other", "Part")]
    assert 'href="/e/Other#h-part"' in r.html and ">see this</a>" in r.html


def test_a_note_that_cannot_be_embedded_is_a_plain_link():
    r = render.render("![[Nowhere]] and ![[Note]]", resolve_link=Resolver(),
                      embed_note=lambda t, f: None)
    assert [a["class"] for a, _ in anchors(r.html, "wikilink")] == ["wikilink missing",
                                                                    "wikilink"]
    assert "!" not in r.html and "note-embed" not in r.html


def test_embedded_html_is_sanitized_again():
    r = render.render("![[Note]]", resolve_link=Resolver(),
                      embed_note=lambda t, f: '<script>alert(1)</script><p onclick="x">ok</p>'
                                              '<a href="javascript:alert(1)">j</a>')
    assert problems(r.html) == [] and "ok" in r.html


def test_excerpt_cuts_a_section_or_a_block():
    html = ('<h1 id="h-top">Top</h1><p>a</p><h2 id="h-part">Part</h2><p>b</p>'
            '<h3 id="h-sub">Sub</h3><p id="b-x">c <em>d</em></p><h2 id="h-next">Next</h2><p>e</p>')
    assert render.excerpt(html, "Part") == ('<h2 id="h-part">Part</h2><p>b</p>'
                                            '<h3 id="h-sub">Sub</h3><p id="b-x">c <em>d</em></p>')
    assert render.excerpt(html, "Next") == '<h2 id="h-next">Next</h2><p>e</p>'
    assert render.excerpt(html, "^x") == '<p id="b-x">c <em>d</em></p>'
    assert render.excerpt(html, None) == html
    assert render.excerpt(html, "Nowhere") is None


# --- many links, one pass ------------------------------------------------------------------


OBSIDIAN_NOTES = [
    "[[a]] [[b#c]] ![[i.png|10]] ![[N]] [[#x]] ![[#y]] [[a]][[a]]![[b]]",
    "[see [[X]]](http://x.test) and ![[x]] in `![[code]]`",
    "<a href='/x'>![[in anchor]] [[too]]</a> ==m [[l]]== %%c [[d]]%% $x$ ^id",
    "> [!note] t [[a]]\n> ![[b.png]]\n\n> [!tip]- u\n> > [!bug]\n> > [[c]]",
    "![[x|y|z]] [[a|b|c]] ![[]] [[]] [[ ]] ![[ # ]] [[#^bad id]]",
]


def _converted(source: str, stock: bool):
    state = RenderState("0" * 32, pipeline.default_resolve_link, pipeline.default_tag_url, {},
                        resolve_attachment=lambda name: "/f/" + name,
                        embed_note=lambda target, fragment: "<p>n</p>", clean=lambda html: html)
    md, _ = pipeline._new_markdown(state)
    if stock:
        md.treeprocessors.register(InlineProcessor(md), "inline", pipeline._INLINE_PRIORITY)
    return md.convert(source), state.links, state.embed_html


@pytest.mark.parametrize("source", OBSIDIAN_NOTES)
def test_links_and_embeds_in_one_pass_render_as_the_stock_loop(source):
    assert _converted(source, stock=False) == _converted(source, stock=True)


def test_thousands_of_links_in_one_paragraph_all_render():
    body = " ".join(f"[[Note {i}]] ![[f{i}.png]]" for i in range(3000))
    r = render.render(body, resolve_attachment=lambda name: "/f/" + name)
    assert len(r.links) == 3000 and len(images(r.html)) == 3000


def test_inputs_that_would_make_a_backtracking_regex_take_forever_render():
    # Each would take years with a pattern that tries every way to split the run.
    body = (" " * 60 + "x %%\n") + ("a" + " " * 5000 + "b ^c d\n\n") + "$$5 off\n" * 2000
    r = render.render(body)
    assert r.text.startswith("x %%") and "^c d" in r.text


def test_in_a_table_an_escaped_pipe_separates_the_alias():
    r = render.render("| a | b |\n|---|---|\n| [[Note\\|the note]] | ![[image.png\\|40]] |\n"
                      "| [[snake\\_case]] | x |", resolve_link=Resolver(),
                      resolve_attachment=FILES.get)
    assert [(link.target, link.text) for link in r.links] == [("Note", "the note"),
                                                              ("snake_case", "snake_case")]
    assert images(r.html) == [{"src": "/attachments/aa/image.png", "alt": "image.png",
                               "width": "40"}]
    assert r.html.count("<td>") == 4
