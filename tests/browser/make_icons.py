"""Draw the PNG icons (home screen, favicon, manifest) from app/static/icon.svg with the
same Chromium the browser tests use, so the PNGs never drift from the SVG:

    .venv/bin/python -m tests.browser.make_icons

The PNGs are committed (the web never rasterises anything); tests/app/test_install.py checks
that they are there, the right size, and named in the manifest. Full-bleed variants
(square corners) are for launchers that cut their own shape: maskable and Apple's.
"""

from __future__ import annotations

from pathlib import Path

from tests.browser.harness import browser_context

STATIC = Path(__file__).resolve().parents[2] / "app" / "static"
ICONS = {  # file: (size in px, full bleed)
    "icon-32.png": (32, False),
    "icon-192.png": (192, False),
    "icon-512.png": (512, False),
    "icon-maskable-512.png": (512, True),
    "apple-touch-icon.png": (180, True),
}


def draw(svg: str, size: int, page) -> bytes:
    page.set_viewport_size({"width": size, "height": size})
    page.set_content(f'<html><body style="margin:0;background:transparent">'
                     f'<div style="width:{size}px;height:{size}px">{svg}</div></body></html>')
    page.locator("svg").evaluate(f"s => {{ s.setAttribute('width', {size}); "
                                 f"s.setAttribute('height', {size}); }}")
    return page.screenshot(omit_background=True,
                           clip={"x": 0, "y": 0, "width": size, "height": size})


def main() -> None:
    svg = (STATIC / "icon.svg").read_text()
    square = svg.replace('rx="7"', 'rx="0"')
    assert square != svg, "icon.svg changed shape: teach make_icons its background"
    with browser_context(device_scale_factor=1) as context:
        page = context.new_page()
        for name, (size, full_bleed) in ICONS.items():
            (STATIC / name).write_bytes(draw(square if full_bleed else svg, size, page))
            print("wrote", STATIC / name)


if __name__ == "__main__":
    main()
