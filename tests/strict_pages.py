"""The page check the page tests share: served with the strict CSP, and nothing in the
HTML that the CSP would have to block."""

from __future__ import annotations

from html.parser import HTMLParser


class InlineFinder(HTMLParser):
    """Collects what a strict CSP would block: inline scripts and styles, handlers."""

    def __init__(self):
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = dict(attrs)
        if tag == "script" and "src" not in names:
            self.problems.append("inline <script>")
        if tag == "style":
            self.problems.append("<style> element")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...>")
            if name in ("href", "src", "action") and (value or "").strip().lower().startswith(
                    "javascript:"):
                self.problems.append(f"<{tag} {name}=javascript:...>")


def assert_strict_page(response) -> None:
    """Served with the CSP, and nothing in it that the CSP would have to block."""
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    finder = InlineFinder()
    finder.feed(response.text)
    assert finder.problems == []
