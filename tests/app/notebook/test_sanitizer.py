"""Hostile markdown and raw HTML through app.notebook.render: nothing executable comes out.

Each output is parsed with the standard library's html.parser and checked for
scripting elements, event handlers, style attributes and dangerous URLs.
"""

import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.notebook import render
from app.notebook.render import sanitize

FORBIDDEN_ELEMENTS = {
    "script", "style", "iframe", "frame", "frameset", "object", "embed", "applet", "svg",
    "form", "button", "meta", "base", "link", "noscript", "template", "xmp",
    "plaintext", "textarea", "select", "option", "title", "video", "audio", "source",
    "track", "animate", "set", "foreignobject", "use", "portal", "isindex", "marquee",
}  # fmt: skip
URL_ATTRIBUTES = {
    "href", "src", "action", "formaction", "poster", "background", "cite", "srcset",
    "data", "codebase", "longdesc", "lowsrc", "dynsrc", "xlink:href", "ping", "manifest",
}  # fmt: skip
FORBIDDEN_ATTRIBUTES = {"style", "srcdoc", "http-equiv", "is", "autofocus"}
# MathML Core is let through (math rendered on the server); a MathML element links nowhere.
MATHML_ELEMENTS = set(sanitize.MATHML_ATTRIBUTES)
SAFE_SCHEMES = {"http", "https", "mailto"}
_SCHEME_RE = re.compile(r"^([a-z][a-z0-9+.\-]*):")
_NOISE_RE = re.compile(r"[\x00-\x20\x7f]")


def url_problem(tag: str, attr: str, value: str) -> str | None:
    compact = _NOISE_RE.sub("", value).lower()
    m = _SCHEME_RE.match(compact)
    if m is None:
        return None  # relative
    allowed = {"http", "https"} if tag == "img" else SAFE_SCHEMES
    return None if m.group(1) in allowed else f"{tag}[{attr}]={value!r}"


class SafetyCheck(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in FORBIDDEN_ELEMENTS:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"{tag}[{name}]")
            if name in FORBIDDEN_ATTRIBUTES:
                self.problems.append(f"{tag}[{name}]")
            if tag in MATHML_ELEMENTS and (name in URL_ATTRIBUTES or ":" in name):
                self.problems.append(f"{tag}[{name}]")
            if name in URL_ATTRIBUTES and value is not None:
                problem = url_problem(tag, name, value)
                if problem:
                    self.problems.append(problem)
            if tag == "a" and name == "href" and value:
                rel = dict(attrs).get("rel") or ""
                if set(rel.split()) != {"noopener", "noreferrer"}:
                    self.problems.append(f"a without rel: {attrs}")

    handle_startendtag = handle_starttag

    def handle_comment(self, data):
        self.problems.append(f"comment {data!r}")

    def handle_decl(self, decl):
        self.problems.append(f"declaration {decl!r}")

    def handle_pi(self, data):
        self.problems.append(f"processing instruction {data!r}")

    def unknown_decl(self, data):
        self.problems.append(f"cdata {data!r}")


# Compiled once: problems() reads every tag of megabytes of HTML in test_render_bounds.
_RAW_TAG = re.compile(r"<[a-z!?/][^>]*>?")
_RAW_FORBIDDEN = re.compile(
    r"</?(?:script|style|svg|iframe|object|embed|annotation-xml|mglyph|maction)\b")
_QUOTED = re.compile(r'"[^"]*"|\'[^\']*\'')
_RAW_HANDLER = re.compile(r"[\s/]on[a-z]+\s*=")


def problems(html: str) -> list[str]:
    check = SafetyCheck()
    check.feed(html)
    check.close()
    found = check.problems
    # Belt and braces on the raw markup, whatever html.parser made of it.
    for match in _RAW_TAG.finditer(html.lower()):
        tag = match.group(0)
        if _RAW_FORBIDDEN.match(tag):
            found.append(f"raw {tag}")
        # a handler needs "on" in the tag: most tags skip the unquoting
        if "on" in tag and _RAW_HANDLER.search(_QUOTED.sub('""', tag)):
            found.append(f"raw {tag}")
    return found


def assert_safe(body: str, **kwargs) -> None:
    r = render.render(body, **kwargs)
    for part in (r.html, r.toc_html):
        assert problems(part) == [], f"{body!r} -> {part!r}"


# fmt: off
HOSTILE = [
    # script elements, all casings and shapes
    "<script>alert(1)</script>",
    "<SCRIPT>alert(1)</SCRIPT>",
    "<ScRiPt>alert(1)</sCrIpT>",
    "<script src=https://evil.example/x.js></script>",
    "<script/xss src=https://evil.example/x.js></script>",
    "<<script>alert(1)//<</script>",
    "<script\n>alert(1)</script\n>",
    "<scr<script>ipt>alert(1)</script>",
    "text <script>alert(1)</script> inline",
    "<script>alert(1)",
    "- item <script>alert(1)</script>",
    "> <script>alert(1)</script>",
    # event handlers
    "<img src=x onerror=alert(1)>",
    "<IMG SRC=x ONERROR=alert(1)>",
    "<img src=x onerror\n=alert(1)>",
    "<img/src=x/onerror=alert(1)>",
    '<body onload="alert(1)">',
    '<div onmouseover="alert(1)">hover</div>',
    '<a href="/ok" onclick="alert(1)">x</a>',
    '<details open ontoggle="alert(1)"><summary>s</summary></details>',
    '<kbd onfocus=alert(1) autofocus tabindex=1>k</kbd>',
    "<video><source onerror=alert(1)></video>",
    "<input onfocus=alert(1) autofocus>",
    "<marquee onstart=alert(1)>m</marquee>",
    # javascript:/vbscript:/data: in every link syntax
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](  javascript:alert(1))",
    "[x](<javascript:alert(1)>)",
    "[x](java\tscript:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](&#x6A;avascript&#x3A;alert(1))",
    "[x](javascript&colon;alert(1))",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    '[x](javascript:alert(1) "title")',
    "![img](javascript:alert(1))",
    "![img](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "![img](data:image/png;base64,iVBORw0KGgo=)",
    "![img](mailto:x@example.com)",
    "<javascript:alert(1)>",
    "<vbscript:msgbox(1)>",
    "[x][ref]\n\n[ref]: javascript:alert(1)",
    "[x][ref]\n\n[ref]: data:text/html,<script>alert(1)</script>",
    "![x][img]\n\n[img]: javascript:alert(1)",
    '<a href="javascript:alert(1)">x</a>',
    '<a href="&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1)">x</a>',
    '<a href="&#x6A&#x61&#x76&#x61&#x73&#x63&#x72&#x69&#x70&#x74&#x3A;alert(1)">x</a>',
    '<a href="  javascript:alert(1)">x</a>',
    '<a href="java&#x09;script:alert(1)">x</a>',
    '<a href="java&#10;script:alert(1)">x</a>',
    '<a href="jav\x00ascript:alert(1)">x</a>',
    '<a href="\x01javascript:alert(1)">x</a>',
    '<a href="javascript&colon;alert(1)">x</a>',
    '<a href=javascript:alert(1)>x</a>',
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
    '<a href="vbscript:msgbox(1)">x</a>',
    '<img src="javascript:alert(1)">',
    '<img src="data:image/png;base64,xx">',
    '<img srcset="javascript:alert(1) 1x">',
    '<a xlink:href="javascript:alert(1)">x</a>',
    '<q cite="javascript:alert(1)">q</q>',
    '<blockquote cite="javascript:alert(1)">q</blockquote>',
    # wiki-link and footnote syntax carrying payloads
    "[[javascript:alert(1)]]",
    "[[x|<script>alert(1)</script>]]",
    '[[x" onmouseover="alert(1)]]',
    "[[<img src=x onerror=alert(1)>]]",
    "[[data:text/html,<script>alert(1)</script>|click]]",
    "Text[^x]\n\n[^x]: <script>alert(1)</script> [y](javascript:alert(1))",
    "Text[^<img src=x onerror=alert(1)>]\n\n[^<img src=x onerror=alert(1)>]: note",
    '[^"><script>alert(1)</script>]\n\n[^"><script>alert(1)</script>]: x',
    "#<script>alert(1)</script> #tag<img/src=x/onerror=alert(1)>",
    # headings feed the table of contents
    "# <script>alert(1)</script>\n\n## <img src=x onerror=alert(1)> two",
    '# a <a href="javascript:alert(1)">b</a>\n\n## c',
    # SVG and MathML
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    '<svg><a xlink:href="javascript:alert(1)"><text x="20" y="20">XSS</text></a></svg>',
    "<svg><animate onbegin=alert(1) attributeName=x dur=1s>",
    '<svg><use href="data:image/svg+xml,<svg id=x onload=alert(1)>#x"/></svg>',
    "<svg><style>{}</style><img src=x onerror=alert(1)></svg>",
    '<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>',
    '<math href="javascript:alert(1)">CLICK</math>',
    "<math><maction actiontype=statusline xlink:href=javascript:alert(1)>X</maction></math>",
    # style
    "<style>body{background:url(javascript:alert(1))}</style>",
    "<STYLE>@import 'https://evil.example/x.css';</STYLE>",
    '<p style="background:url(javascript:alert(1))">x</p>',
    '<div style="position:fixed;top:0;left:0;width:100%;height:100%">overlay</div>',
    '<span style="x:expression(alert(1))">x</span>',
    # embedding, forms, document-level elements
    '<iframe src="javascript:alert(1)"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<object data="javascript:alert(1)"></object>',
    '<embed src="data:text/html,<script>alert(1)</script>">',
    '<form action="javascript:alert(1)"><button formaction="javascript:x">go</button></form>',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<base href="javascript:alert(1)//">',
    '<link rel="stylesheet" href="https://evil.example/x.css">',
    '<frameset><frame src="javascript:alert(1)"></frameset>',
    '<applet code="x.class"></applet>',
    '<portal src="https://evil.example"></portal>',
    # malformed and unclosed HTML
    '<img src="x" onerror="alert(1)"',
    "<a href='javascript:alert(1)'",
    '<div <script>alert(1)</script>>',
    '<img """><script>alert(1)</script>">',
    "<a href=\"x\"\"onclick=alert(1)>x</a>",
    "<</p>iframe src=javascript:alert(1)//",
    "<p><div></p><script>alert(1)</script>",
    "<table><td><script>alert(1)</script>",
    # comment tricks
    "<!--<script>alert(1)</script>-->",
    "<!-- --!><script>alert(1)</script> -->",
    "<!--><script>alert(1)</script>-->",
    "<!-- a -- > <img src=x onerror=alert(1)> -->",
    "<![CDATA[<script>alert(1)</script>]]>",
    "<?xml version='1.0'?><script>alert(1)</script>",
    "<!DOCTYPE html><script>alert(1)</script>",
    # mutation XSS classics
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    '<template><script>alert(1)</script></template>',
    '<template><img src=x onerror=alert(1)></template>',
    '<svg></p><style><a id="</style><img src=1 onerror=alert(1)>">',
    '<math><mi><mglyph><svg><mtext><textarea><path id="</textarea><img onerror=alert(1) src=1>">',
    '<form><math><mtext></form><form><mglyph><style></math><img src onerror=alert(1)>',
    '<textarea></textarea><script>alert(1)</script>',
    '<title><img src=x onerror=alert(1)></title>',
    '<xmp><img src=x onerror=alert(1)></xmp>',
    '<noembed><img src=x onerror=alert(1)></noembed>',
    '<select><template><style><img src=x onerror=alert(1)></style></template></select>',
    '<listing>&lt;img src=x onerror=alert(1)&gt;</listing>',
    # markdown-level tricks
    "`<script>`alert(1)`</script>`",
    "```\n</code></pre><script>alert(1)</script>\n```",
    "```html\n<script>alert(1)</script>\n```",
    '!!! note "<script>alert(1)</script>"\n    <img src=x onerror=alert(1)>',
    '!!! "onclick=alert(1)" x\n    body',
    "| a |\n|---|\n| <img src=x onerror=alert(1)> |",
    "- [ ] <script>alert(1)</script>",
    '<details><summary onclick="alert(1)">s</summary><img src=x onerror=alert(1)></details>',
    '<span class="k" id="x" onclick="alert(1)">x</span>',
    '<h2 id="javascript:alert(1)">x</h2>',
    "\x02klzzwxh:0000\x03<script>alert(1)</script>",
]
# fmt: on


def test_corpus_is_large_enough():
    assert len(HOSTILE) >= 60
    assert len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_input_renders_safe(body):
    assert_safe(body)


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_input_with_hostile_callbacks(body):
    # Even a careless caller (resolver and tag URLs echoing the text) stays safe.
    assert_safe(
        body + "\n\n[[javascript:alert(1)]] #tag ![[javascript:alert(1).png]] "
        '![[x.png|100"onerror=alert(1)]] ![[Note#h]] [[x.pdf]]',
        resolve_link=lambda target: (target, False),
        tag_url=lambda tag: "javascript:" + tag,
        resolve_attachment=lambda name: name,  # echoes "javascript:..." back
        embed_note=lambda target, fragment: body,  # "another note" as hostile as this one
    )


def test_checker_catches_what_it_should():
    # The checker itself must not be blind.
    assert problems('<a href="javascript:alert(1)">x</a>')
    assert problems('<a href="java&#x09;script:x" rel="noopener noreferrer">x</a>')
    assert problems('<img src="data:image/png,xx">')
    assert problems("<svg></svg>")
    assert problems('<p onclick="x">y</p>')
    assert problems('<p style="x">y</p>')
    assert problems("<!-- c -->")
    assert not problems('<a href="/x" rel="noopener noreferrer">x</a><img src="a.png">')


def test_safe_links_survive():
    r = render.render("[a](https://x.org) [b](mailto:me@x.org) [c](/rel) [d](#h-x) [e](../up)")
    hrefs = re.findall(r'href="([^"]*)"', r.html)
    assert hrefs == ["https://x.org", "mailto:me@x.org", "/rel", "#h-x", "../up"]


def test_user_ids_outside_our_namespaces_are_dropped():
    r = render.render('<h2 id="log">x</h2>\n\n<sup id="main">1</sup>')
    assert "id=" not in r.html


# An HTML-ish alphabet: whole tokens that mean something to an HTML or markdown
# parser, plus single characters, so random strings reach odd parser states.
TOKENS = [
    "<", ">", "/", "=", '"', "'", " ", "\n", "\t", "!", "-", "--", "<!--", "-->", "&", "#",
    ";", ":", "(", ")", "[", "]", "[[", "]]", "|", "`", "```", "*", "_", "\\", "?",
    "script", "SCRIPT", "svg", "math", "style", "iframe", "img", "a", "p", "div",
    "template", "noscript", "textarea", "title", "table", "td", "form", "object",
    "onload", "onerror", "onclick", "href", "src", "srcdoc", "style=", "x", "1",
    "javascript:", "JaVaScRiPt:", "java\tscript:", "vbscript:", "data:", "&#106;",
    "&#x6A;", "&colon;", "&#58;", "&lt;", "&gt;", "&quot;", "alert(1)", "http://",
    "#tag", "!!! note", "- [ ] ", "[^1]", "[^1]: ", "](", "<![CDATA[", "]]>", "\x00",
]  # fmt: skip


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=60).map("".join))
def test_random_html_ish_text_renders_safe(body):
    r = render.render(body, embeds={"run": lambda s: "<b>card</b>"})
    assert problems(r.html) == []
    assert problems(r.toc_html) == []
    assert "CPEMBED" not in r.text
