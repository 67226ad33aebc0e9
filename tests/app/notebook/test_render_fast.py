"""The render's shortcuts give exactly what the stock parts give: the inline processor that
skips tries which cannot match (and takes a pattern's matches in one pass), the bounded
parts (link brackets matched in one pass, footnote numbers from a table, blocks split up
front, the raw HTML finder), the toc pass that escapes a plain heading's text, the
regex walk of sanitized HTML for the plain text, the Pygments formatter that shares its
style table, and the sanitizer built once. Each is compared with the stock part on a
corpus of tricky notes and a seeded jumble of them."""

from __future__ import annotations

import random

import nh3
import pytest
from markdown.extensions.footnotes import FootnoteInlineProcessor
from markdown.extensions.toc import TocExtension, TocTreeprocessor, slugify_unicode
from markdown.preprocessors import HtmlBlockPreprocessor
from markdown.treeprocessors import InlineProcessor
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name

from app.notebook.render import links, pipeline, plaintext, sanitize
from app.notebook.render.anchors import heading_slug
from app.notebook.render.block_skip import Blocks, SkippingBlockLoop
from app.notebook.render.bounded import NumberedFootnotes
from app.notebook.render.highlight import CodeFormatter
from app.notebook.render.inline_skip import SkippingInlineProcessor
from app.notebook.render.syntax import RenderState
from app.notebook.render.toc import Toc
from tests.pathological_markdown import CORPUS as PATHOLOGICAL

NOTES = [
    "plain prose with nothing special at all",
    "[[Target]] and [[Other|alias text]] and #tag and #nested/tag-",
    "a [link](http://x.test/a_b) and ![img](http://x.test/i.png \"t\") and [[W]]",
    "[see [[X]]](http://x.test) stays one link",
    "[ref][d] and [d] and [D][] and ![pic][d]\n\n[d]: http://x.test/d 'Title'",
    "[ref][missing] and [missing] with no definitions",
    "`code [[not a link]] #nottag` and ``double `tick` code``",
    "escaped \\[[not]] \\#not \\*not\\*",
    "<http://auto.test/x> <me@mail.test> <b>raw</b> <span class=x>s</span>",
    "&amp; &#39; &#x27; &copy; & lone; AT&T",
    "*em* **strong** ***both*** _u_ __uu__ snake_case_word 2*3*4",
    "line one  \nline two (a hard break)",
    "footnote[^1] and [^missing]\n\n[^1]: the note [[In Foot]]",
    "- [ ] open\n- [x] done [[Task Link]]\n- plain",
    "# Title\n\n## Second #tag\n\ntext [[H]]",
    "> quote [[Q]] *em*\n> more",
    "| a | b |\n|:--|--:|\n| [[T]] | `c` |",
    "!!! note \"Heads up\"\n    body [[Adm]]",
    "```python\nimport x  # [[no]]\n```\n\n```\nplain\n```\n\n```nosuchlang\nx\n```",
    "```python hl_lines=\"1\"\nx = 1\ny = 2\n```",
    "    indented code\n    [[no]]",
    "[[a]][[b]] [[c|]] [[ spaced   target ]] [[2024-W03]] [[2024-03-31]]",
    "<a href=\"http://x.test\">[[inside anchor]]</a> #tag-in-text",
    "[outer [inner] brackets](http://x.test) [unclosed [[x]]",
    "[a](b [c]( [d](e) ]f](g) [h]( 'i' [j](\"k\") ![l][ [m][n] [[o](p)](q) [r](s (t) u) [v](",
    "[[[[a](b)]]]] ]][[ [x]y](z) \\[a](b) [a\\](b) [a]\n(b) [a](<b c>) [a](b \"c\"d)",
    "![alt [[x]]](http://x.test/i.png) [![img](http://i.test/i.png)](http://x.test)",
    "<details><summary>s [[S]]</summary>d</details> <kbd>K</kbd>",
    "1. one\n2. two [[N]]\n\n---\n\nafter rule",
    "- a\n    - nested > not quote\n\n    para in item\n* b\n+ c\n\n3. three\n   1. sub",
    "> - list in quote\n> > nested quote\n>\n> # heading in quote",
    "text\n***\n_ _ _\ntext | not a table\n\na | b\n--|--\n1 | 2",
    "[id]: http://x.test/id\n[^fn]: foot\n\nuse [id] and [^fn]",
    "Setext\n======\n\nSub\n---",
    "<!-- comment --> text <?pi?> <![CDATA[x]]>",
    "<script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror=alert(1)>",
    # matches that touch: what each pattern sees looking back from the next one
    "\\\\`code` `a``b` ``x``` y`` \\\\\\`z` `\\\\`w`",
    "#a#b #a(#b) #a-#b #a_#b (#c)#d",
    "[a](b)[c](d)![e](f)[g](h)[i](j)!![k](l) [m](n)![o](p)",
    "&amp;&amp;&#1;&#x2;&copy;<b></b><i>&lt;</i><http://a.test><http://b.test>",
    # lines that split their block (headings, admonitions), and what they follow
    "| a |\n|---|\n| 1 |\n# h\ntext\n## h2\n### h3\n!!! note\n    body\nmore\n!!! tip\nx",
    "- a\n# h\n- b\n> q\n# h\n    code\n# h\n1. o\n!!! warning \"t\"\n    w",
    "<div>\n# h\n</div>\n\n<p\n# h\nSetext\n# h\n===\n#not\n#\n# ",
    "- a\n\n    b\n# h\n***\n!!! note\n    x\n* * *\n_ _ _\n   ***\n    ***\n**\n* * x",
    "| a |\n|---|\n| 1 |\n***\nSetext\n===\n***\n1. a\n\n    b\n    # h\n# h\n***",
    "a\n===\nb\n---\nc\nd\n===\n# h\n===\nx\n    code\n===\ny\n| a |\n---\nz\n- i\n--\nt\n> q\n=",
    "!!! note\n===\nq\n    ---\nr\n=-=- \ns\n\n    i\n    ===\n\nu\n=\n\n\nv\n---\n    w",
    "> a\n> # h\n> b\n> ***\n> c\n> ===\n> > # i\n> > j\n> - k\n> # l\n>     m\n> # n\nlazy\n# o",
    "x[^b] y[^a] z[^b] w[^none]\n\n[^a]: A [^b]\n[^b]: B\n\n<a <b <c",
    "[[a]][[b]]#t[[c]]`d`[[e]] [^1][^1]\\*\\*\\[\\]\n\n[^1]: f",
    # headings: plain ones (escaped text), and with markup, entities, HTML, escapes, notes
    "# A\n## B\n### C\n## B\n# A\n#### D\n## B_1\n# A_1\n###### six\n# a_1\n#\n#   a   b  ",
    "### three\n# one\n## two\n###### six\n## two\n# one\n### three",
    "# *em* `code` [[W]] #t x[^1] **b**\n# a &amp; b <b>c</b> &copy;\n# \\*x\\* \\<y\\>\n\n[^1]: f",
    "# a < b > c & d\n# Ünïcode — dash ½\n# <!-- c --> x\n# [l](http://x.test) <http://a.test>",
    "T\n=\n\nT\n-\n\n> # q\n> # q\n\n- # li\n- # li\n\n!!! note\n    # in\n\n| # | h |\n|---|---|",
]

_PIECES = ["\n---\n", "\n===\n", "1. ", "- ", "> ", "| a | b |\n|---|---|\n", "    ",
           "[d]: http://d.test\n", "[^f]: f\n", "!!! note\n    n\n", "***",
           "[[A]]", "[[B|c]]", "#tag", "`c`", "*e*", "_u_", "[l](http://x.test)", "![i](u)",
           "[r]", "[r][s]", "<b>", "</b>", "&amp;", "<http://a.test>", "\\*", "  \n", "[^1]",
           "word ", "\n\n", "- [ ] t\n", "# H\n", "> q\n", "```\nc\n```\n", "[", "]", "(",
           ")", "!", "<", ">", "&", ";", "__", "**", "\n[r]: http://r.test\n"]


def _jumble(count: int = 300) -> list[str]:
    rng = random.Random(14)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 30)))
            for _ in range(count)]


CORPUS = NOTES + _jumble()


def _converted(source: str, stock: bool) -> tuple[str, str, list, list, list]:
    state = RenderState("0" * 32, pipeline.default_resolve_link, pipeline.default_tag_url, {})
    md, ext = pipeline._new_markdown(state)
    if stock:
        md.treeprocessors.register(InlineProcessor(md), "inline", pipeline._INLINE_PRIORITY)
        del md.parser.parseBlocks  # the class's own loop again
        ours = md.inlinePatterns["footnote"]
        md.inlinePatterns.register(FootnoteInlineProcessor(ours.pattern, ours.footnotes),
                                   "footnote", pipeline._FOOTNOTE_PRIORITY)
        md.preprocessors.register(HtmlBlockPreprocessor(md), "html_block",
                                  pipeline._HTML_BLOCK_PRIORITY)
        md.preprocessors.deregister("cp_split_blocks")
        md.parser.blockprocessors["quote"].split = lambda lines: lines  # the stock quote's
        toc = TocTreeprocessor(md, TocExtension(**pipeline._TOC_CONFIG).getConfigs())
        md.treeprocessors.register(toc, "toc", pipeline._TOC_PRIORITY)
        for item in list(md.inlinePatterns._priority):
            if item.name in links.BOUNDED:
                ours = md.inlinePatterns[item.name]
                md.inlinePatterns.register(links.STOCK[item.name](ours.pattern, md), item.name,
                                           item.priority)
    assert isinstance(md.treeprocessors["inline"], SkippingInlineProcessor) is not stock
    assert isinstance(md.parser.parseBlocks, SkippingBlockLoop) is not stock
    assert isinstance(md.inlinePatterns["footnote"], NumberedFootnotes) is not stock
    assert isinstance(md.inlinePatterns["link"], links.Link) is not stock
    assert isinstance(md.treeprocessors["toc"], Toc) is not stock
    html = md.convert(source)
    return html, md.toc, md.toc_tokens, state.links, state.tags  # type: ignore[attr-defined]


@pytest.mark.parametrize("source", CORPUS)
def test_skipping_and_bounded_parts_render_as_the_stock_ones(source):
    assert _converted(source, stock=False) == _converted(source, stock=True)


# nested past the bounds (bounded.MAX_QUOTE_DEPTH, the stack), which the stock parts lack;
# and brackets, on which the stock link patterns take seconds (links.py), with the short
# notes above comparing those
_PAST_THE_BOUNDS = {"deep-blockquote", "deep-blockquote-lines", "deep-list", "brackets",
                    "brackets-then-link"}


# blocks a processor takes the start of and puts the rest back (`blocks.insert(0, ...)`)
_PUT_BACK = ["    code\ntext\n\n", "- a\n\n    b\nc\n\n", "x[^1]\n\n[^1]: a\n    b\nc\n\n",
             "!!! note\n    a\nb\n\n", "t\n---\nu\n***\nv\n\n"]


@pytest.mark.parametrize("source", [
    *(pytest.param(PATHOLOGICAL[name](3_000), id=name)
      for name in sorted(set(PATHOLOGICAL) - _PAST_THE_BOUNDS)),
    *(pytest.param(piece * (3_000 // len(piece)), id=f"put-back-{n}")
      for n, piece in enumerate(_PUT_BACK)),
])
def test_long_notes_render_as_with_the_stock_parts(source):
    # long enough for the parts that change their way past a length (block_skip.LONG)
    assert _converted(source, stock=False) == _converted(source, stock=True)


def test_heading_slug_is_the_toc_slugify_with_its_prefix():
    texts = [line for note in CORPUS for line in note.split("\n")]
    texts += ["", " ", "--", "a - b", "\t tab\u00a0nbsp\u2003em", "ÉCOLE Straße", "a_b-c d"]
    for text in texts:
        for separator in ("-", "_"):
            expected = "h-" + (slugify_unicode(text, separator) or "section")
            assert heading_slug(text, separator) == expected, text


def _events(html: str, regex: bool) -> plaintext.Extracted:
    into = plaintext._Extractor("0" * 32, None)
    if regex:
        plaintext._scan(html, into)
    else:
        parser = plaintext._Parser(into)
        parser.feed(html)
        parser.close()
    into.close()
    return plaintext.Extracted("".join(into.flat), into.link_order, into.link_context,
                               into.tag_order)


@pytest.mark.parametrize("source", CORPUS)
def test_plain_text_regex_walk_matches_html_parser(source):
    nonce = "0" * 32
    state = RenderState(nonce, pipeline.default_resolve_link, pipeline.default_tag_url, {})
    body, _, _ = pipeline._convert(source, state)
    html = sanitize.make_cleaner(nonce)(body)
    assert _events(html, regex=True) == _events(html, regex=False)


def test_plain_text_of_unexpected_html_goes_to_html_parser():
    html = '<p>a <!-- c --> b <a class="tag" href="/t">#t</a></p>'
    found = plaintext.extract(html, "0" * 32, None)
    assert found.text == "a  b #t"  # html.parser's two pieces of text around the comment


def test_code_formatter_writes_what_pygments_writes():
    code = "import torch\n\ndef f(x):\n    return x * 2  # comment\n"
    for lang in ("python", "bash", "yaml", "text"):
        lexer = get_lexer_by_name(lang)
        for options in ({}, {"hl_lines": [2]}, {"linenos": "inline"}):
            expected = highlight(code, lexer, HtmlFormatter(cssclass="highlight", **options))
            for _ in range(2):  # the second one takes the shared table
                got = highlight(code, lexer, CodeFormatter(cssclass="highlight", lang_str="x",
                                                           **options))
                assert got == expected
    assert CodeFormatter().get_style_defs(".h") == HtmlFormatter().get_style_defs(".h")


def test_the_reused_sanitizer_cleans_as_nh3_clean_does():
    nonce, other = "a" * 32, "b" * 32
    clean = sanitize.make_cleaner(nonce)
    for source in CORPUS:
        body, _, _ = pipeline._convert(source, RenderState(
            nonce, pipeline.default_resolve_link, pipeline.default_tag_url, {}))
        body += (f'<a data-cp-ref="{nonce}:w:0" href="/a">kept</a>'
                 f'<a data-cp-ref="{other}:w:0" href="/b">dropped mark</a>')
        expected = nh3.clean(body, **{**sanitize._OPTIONS, "attribute_filter": _filter(nonce)})
        assert _tasks_in_order(clean(body)) == _tasks_in_order(expected)


def _filter(nonce: str):
    def attribute_filter(tag, attr, value):
        if attr == sanitize.MARKER_ATTR:
            return value if value.startswith(nonce + ":") else None
        return sanitize._attribute_filter(tag, attr, value)  # the rest reads no state

    return attribute_filter


def _tasks_in_order(html: str) -> str:
    # nh3 writes a task box's set attributes in either order (a hash map's), run to run
    return html.replace('type="checkbox" disabled=""', 'disabled="" type="checkbox"')


def test_markers_of_another_render_are_dropped_even_inside_one():
    outer, inner = sanitize.make_cleaner("a" * 32), sanitize.make_cleaner("b" * 32)
    html = f'<a data-cp-ref="{"a" * 32}:w:0" href="/x">x</a>'
    assert "data-cp-ref" not in inner(html)
    assert "data-cp-ref" in outer(html)
    assert "data-cp-ref" not in sanitize._clean(html)  # no render running: no marker kept


def _list_operation(rng: random.Random, seq, n: int, tag: str):
    """One random list operation on `seq` (a list or a Blocks), and what it gave."""
    op, i, j = rng.randrange(8), rng.randint(-n - 2, n + 2), rng.randint(-n - 2, n + 2)
    step = rng.choice([None, 1, 2, -1])
    try:
        if op == 0:
            return seq.pop(i) if rng.random() < 0.5 else seq.pop(0)
        if op == 1:
            return seq.insert(i, tag)
        if op == 2:
            return seq[i]
        if op == 3:
            return list(seq[i:j:step])
        if op == 4:
            del seq[i:j:step]
        elif op == 5:
            seq[i] = tag
        elif op == 6:
            del seq[i]
        return len(seq), bool(seq), list(seq)
    except IndexError:
        return "IndexError"


def test_blocks_kept_back_to_front_behave_as_a_list():
    for trial in range(500):
        items = [f"b{k}" for k in range(trial % 9)]
        blocks = Blocks(items)
        for step in range(12):
            seed = trial * 100 + step
            got = _list_operation(random.Random(seed), blocks, len(items), f"x{seed}")
            expected = _list_operation(random.Random(seed), items, len(items), f"x{seed}")
            assert got == expected and list(blocks) == items, (trial, step)
