"""Stylesheet for the CSS classes that Pygments puts on highlighted code."""

from pygments.formatters import HtmlFormatter

LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"


def _rules(style: str) -> list[str]:
    # Pygments also emits bare `pre { ... }` and line-number rules; only the rules scoped
    # to `.highlight` belong to us, the rest would restyle every <pre> on the page.
    css = HtmlFormatter(style=style).get_style_defs(".highlight")
    return [line for line in css.splitlines() if line.startswith(".highlight")]


def pygments_css() -> str:
    """Light rules, then dark ones under `@media (prefers-color-scheme: dark)`."""
    light = "\n".join(_rules(LIGHT_STYLE))
    dark = "\n".join("  " + line for line in _rules(DARK_STYLE))
    return (
        f"/* code highlighting: pygments {LIGHT_STYLE} / {DARK_STYLE} */\n"
        f"{light}\n"
        f"@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
    )


class CodeFormatter(HtmlFormatter):
    """Pygments' HtmlFormatter for codehilite (its `pygments_formatter`), less the
    stylesheet it builds in every constructor: a table per style (for every code block)
    that the HTML with CSS classes never reads. Built once per (style, prefix) here and
    shared; nothing changes it after construction. Same output as `HtmlFormatter`
    (codehilite passes `lang_str`, which Pygments' formatter ignores)."""

    _sheets: dict[tuple[object, str], tuple[dict, dict]] = {}

    def _create_stylesheet(self) -> None:
        key = (self.style, self.classprefix)
        sheet = self._sheets.get(key)
        if sheet is None:
            super()._create_stylesheet()
            self._sheets[key] = (self.ttype2class, self.class2style)
        else:
            self.ttype2class, self.class2style = sheet
