"""Lists and fenced code as CommonMark reads them (app/notebook/render/lists.py): nesting by
the item's own indentation, lists after a paragraph, fences in list items and fences that
are never closed, loose lists, and the fence grammar the task boxes are found with."""

import re

import pytest

from app.notebook import render, tasks
from tests.helpers import Elements


def _shape(html: str) -> str:
    """The HTML's list and code tags only, in order: "<ul><li><ul><li></li></ul></li></ul>"."""
    return "".join(f"<{end}{tag}>" for end, tag in re.findall(r"<(/?)(ul|ol|li|pre|p)\b", html))


def test_lists_nest_by_two_spaces_as_on_github_and_in_obsidian():
    html = render.render("- a\n  - b\n    - c\n- d\n").html
    assert _shape(html) == "<ul><li><ul><li><ul><li></li></ul></li></ul></li><li></li></ul>"
    assert [text.split()[0] for _, text in Elements(html).all("li")] == ["a", "b", "c", "d"]
    ordered = render.render("1. a\n   1. b\n2. c\n").html
    assert _shape(ordered) == "<ol><li><ol><li></li></ol></li><li></li></ol>"
    # four spaces still nest, as they did
    assert _shape(render.render("- a\n    - b\n").html) == "<ul><li><ul><li></li></ul></li></ul>"


def test_an_item_holds_its_paragraphs_and_code_at_its_own_indentation():
    html = render.render("- one\n\n  two\n\n      code\n- three\n").html
    assert _shape(html) == "<ul><li><p></p><p></p><pre></pre></li><li><p></p></li></ul>"
    assert [text for _, text in Elements(html).all("code")] == ["code\n"]


def test_a_loose_list_makes_every_item_a_paragraph():
    html = render.render("- a\n- b\n\n- c\n").html
    assert _shape(html) == "<ul><li><p></p></li><li><p></p></li><li><p></p></li></ul>"


def test_another_marker_starts_another_list_and_long_numbers_are_text():
    assert _shape(render.render("- a\n+ b\n").html) == "<ul><li></li></ul><ul><li></li></ul>"
    assert _shape(render.render("1. a\n2) b\n").html) == "<ol><li></li></ol><ol><li></li></ol>"
    assert "<li>" not in render.render("1234567890. not an item").html


def test_fences_in_list_items_keep_blank_lines_and_end_with_the_item():
    source = ("1. build\n   ```bash\n   make\n\n   make install\n   ```\n"
              "2. run\n   ```\n   ./x\n3. done")
    els = Elements(render.render(source).html)
    assert [text for _, text in els.all("code")] == ["make\n\nmake install\n", "./x\n"]
    assert "```" not in render.render(source).html
    assert _shape(render.render(source).html).count("<li>") == 3


def test_fences_as_commonmark_reads_them():
    cases = {
        "  ```\n  indented\n    more\n  ```": "indented\n  more\n",  # indentation taken off
        "```\nnever closed\n\n": "never closed\n",  # runs to the end
        "````\n```\ninside\n````": "```\ninside\n",  # closed only by as long a fence
        "~~~ py title=x\nprint()\n~~~": "print()\n",  # the info string's first word
        "```\n```": "",
    }
    for source, code in cases.items():
        els = Elements(render.render(source).html)
        assert [text for _, text in els.all("code")] == [code], source
    # a backtick fence's info string holds no backtick: that is a code span
    assert "<pre>" not in render.render("``` `x` ```\nnot code").html


def test_task_boxes_in_fenced_code_are_neither_found_nor_shown():
    body = "- [ ] real\n  ```\n  - [ ] in code\n  ```\n- [x] also real\n```\n- [ ] code\n"
    assert [ticked for _, ticked in tasks.boxes(body)] == [False, True]
    assert render.render(body).tasks == [False, True]
    assert [(f.start, f.end) for f in render.fenced_blocks("a\n```\nx\n```\nb")] == [(2, 12)]


CARD = '<figure class="run-card">card {}</figure>'
EMBEDS = {"run": lambda source: CARD.format(source.strip()),
          "changes": lambda source: f"<section>changes {source.strip()}</section>"}


@pytest.mark.parametrize("source, shape", [
    ("- ran:\n  ```run\n  id: 1\n  ```\n- next", "<ul><li></li><li></li></ul>"),
    ("1. ```run\n   id: 1\n   ```\n2. next", "<ol><li></li><li></li></ol>"),
    ("- a\n  - ran:\n    ~~~run\n    id: 1\n    ~~~", "<ul><li><ul><li></li></ul></li></ul>"),
    ("> ```run\n> id: 1\n> ```", ""),
    ("> [!note] Runs\n> - ```run\n>   id: 1\n>   ```", "<p></p><ul><li></li></ul>"),
])  # fmt: skip
def test_embed_fences_are_embeds_in_list_items_and_quotes(source, shape):
    html = render.render(source, embeds=EMBEDS).html
    assert html.count(CARD.format("id: 1")) == 1 and "<pre>" not in html and "```" not in html
    assert _shape(html) == shape


def test_every_embed_the_renderer_knows_and_code_beside_them():
    source = "- ```changes\n  week: 2024-W13\n  ```\n- ```python\n  run = 1\n  ```"
    html = render.render(source, embeds=EMBEDS).html
    assert "<section>changes week: 2024-W13</section>" in html
    assert [text for _, text in Elements(html).all("code")] == ["run = 1\n"]
    # no embeds given, or a block never closed (still being written): code
    assert "<pre>" in render.render("- ```run\n  id: 1\n  ```").html
    assert "<pre>" in render.render("- ```run\n  id: 1\n- b", embeds=EMBEDS).html


@pytest.mark.parametrize("source, shape", [
    ("> - a\n>   - b\n>     - c\n> - d",
     "<ul><li><ul><li><ul><li></li></ul></li></ul></li><li></li></ul>"),  # two spaces nest
    ("> a paragraph\n> - then a list\n> - of two", "<p></p><ul><li></li><li></li></ul>"),
    ("> 1. a\n>    1. b\n> 2. c", "<ol><li><ol><li></li></ol></li><li></li></ol>"),
    ("> - a\n> + b", "<ul><li></li></ul><ul><li></li></ul>"),  # another marker, another list
    ("> - a\n>\n> - b", "<ul><li><p></p></li><li><p></p></li></ul>"),  # loose
    ("> - build\n>   ```\n>   make\n>   ```", "<ul><li><pre></pre></li></ul>"),
    ("> > - a\n> >   - b", "<ul><li><ul><li></li></ul></li></ul>"),  # quotes in quotes
    ("- item\n\n  > - a\n  >   - b",
     "<ul><li><p></p><ul><li><ul><li></li></ul></li></ul></li></ul>"),
])  # fmt: skip
def test_lists_in_quotes_follow_the_same_rules_as_at_the_top_level(source, shape):
    html = render.render(source).html
    assert _shape(html) == shape
    assert "<blockquote>" in html


def test_lists_in_callouts_follow_the_same_rules():
    html = render.render("> [!tip] Steps\n> - one\n>   - one and a half\n> - two").html
    assert _shape(html) == "<p></p><ul><li><ul><li></li></ul></li><li></li></ul>"
    assert Elements(html).all("p", "callout-title") == [({"class": "callout-title"}, "Steps")]
    # a body paragraph right after the title is a paragraph, as before
    html = render.render("> [!note] Title\n> body\n> more").html
    assert [text for _, text in Elements(html).all("p")] == ["Title", "body\nmore"]


# --- GitHub's inline extensions (render/gfm.py) --------------------------------------


def test_strikethrough_on_one_line_between_words():
    html = render.render("a ~~gone~~ b ~~ not ~~ c ~~x\n\ny~~ `~~code~~`").html
    assert [text for _, text in Elements(html).all("del")] == ["gone"]
    assert "~~ not ~~" in html and "<code>~~code~~</code>" in html


def test_bare_urls_are_links_but_not_their_punctuation():
    html = render.render(
        "See https://x.test/a_(b)). Or www.example.com, and http://x.test/#frag.\n\n"
        "[named](http://z.test) <http://y.test> `http://q.test` x@www.a.test http://").html
    found = [(attrs["href"], text) for attrs, text in Elements(html).all("a")]
    assert found == [("https://x.test/a_(b)", "https://x.test/a_(b)"),
                     ("http://www.example.com", "www.example.com"),
                     ("http://x.test/#frag", "http://x.test/#frag"),
                     ("http://z.test", "named"), ("http://y.test", "http://y.test")]
    assert render.render("http://x.test/#frag").tags == []  # the "#" is the URL's
