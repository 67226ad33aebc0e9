"""The sharding view in real Chromium against the real server (`commonplace up`), with a
real finished ZeRO run stored as the runner stores it: on a phone and a desktop, no
console errors (a CSP refusal is one), nothing wider than the screen, a tapped tile's
details in the panel, the strategy switch changing the owners without a reload (the
picked panel fetched then, focus on its heading) or, without the script, by a link to the
page showing it - and the experiment page's view of its form."""

from __future__ import annotations

import pytest

from app import create_app
from tests.browser.harness import (
    BROWSER,
    assert_fits,
    browser_context,
    chromium_page,
    hard_timeout,
    screenshot,
)
from tests.real_runs import lab_output, store_run

pytestmark = BROWSER
TEST_SECONDS = 90


@pytest.fixture(scope="module")
def live_server(module_server) -> str:
    """One server for the module: its tests only read the run below and the forms."""
    return module_server[0]


@pytest.fixture(scope="module")
def zero_run(tmp_path_factory, module_server) -> str:
    """The run page's URL of a real finished ZeRO run (ddp, zero1, zero2, zero3, fsdp2)."""
    base, data = module_server
    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/commonplace.db"})
    run_id = store_run(app, "zero", lab_output(tmp_path_factory, "zero"))
    return f"{base}/runs/{run_id}"


def owners(page, strategy: str, name: str) -> str:
    tile = page.locator(f'.shard-panel[data-strategy="{strategy}"] '
                        f'.shard-tile[data-name="{name}"]').first
    return tile.get_attribute("data-owners")


@pytest.mark.parametrize("device", ["phone", "desktop"])
def test_tap_a_tile_and_switch_strategy(zero_run, live_server, device):
    with hard_timeout(TEST_SECONDS), chromium_page(device) as (page, problems):
        page.goto(zero_run)
        page.locator("#shard-run").scroll_into_view_if_needed()
        assert_fits(page)
        ddp = page.locator('.shard-panel[data-strategy="ddp"]')
        fsdp = page.locator('.shard-panel[data-strategy="fsdp2"]')
        assert ddp.is_visible() and not fsdp.is_visible()
        page.evaluate("window.__samePage = true")

        tile = ddp.locator('.shard-tile[data-name="wte.weight"]')
        tile.click()
        detail = ddp.locator(".shard-detail")
        detail.get_by_text("wte.weight").wait_for()
        assert "every rank, a full copy" in detail.inner_text()
        assert "all-reduced by DDP's reducer" in detail.inner_text()
        assert tile.get_attribute("aria-pressed") == "true"
        screenshot(page, f"sharding-{device}")

        ddp_owners = owners(page, "ddp", "wte.weight")
        links = page.locator("#shard-run .shard-links")
        links.get_by_role("link", name="fsdp2", exact=True).click()
        fsdp.wait_for()  # fetched when picked: the page came without it
        assert fsdp.is_visible() and ddp.count() == 0
        assert links.locator('[aria-current="true"]').inner_text() == "fsdp2"
        assert page.locator("#shard-run .shard-status").inner_text() == "Showing fsdp2."
        assert page.evaluate("document.activeElement.closest('.shard-panel')"
                             ".dataset.strategy") == "fsdp2"
        assert page.url.endswith("?sharding=fsdp2#shard-run")
        fsdp.locator('.shard-tile[data-name="wte.weight"]').focus()
        page.keyboard.press("Enter")
        fsdp.locator(".shard-detail").get_by_text("rank 0: rows 0–31").wait_for()
        assert "all-gathered" in fsdp.locator(".shard-detail").inner_text().lower()
        assert owners(page, "fsdp2", "wte.weight") != ddp_owners

        # a collapsed run of blocks opens to each block
        each = fsdp.locator("details.shard-each").first
        each.locator("summary").click()
        assert each.locator(".shard-layer").count() >= 2
        # a block of it names itself and shows its row's details (data-of)
        second = each.locator(".shard-layer").nth(1)
        second.locator(".shard-tile").first.click()
        detail = fsdp.locator(".shard-detail").inner_text()
        assert second.locator(".shard-layer-head").inner_text() in detail
        assert "rank 0:" in detail and "blocks.1." in detail
        assert_fits(page)
        assert page.evaluate("window.__samePage === true")  # no reload
        screenshot(page, f"sharding-{device}-fsdp2")

        # the experiment page: the form's values under every strategy it offers
        page.goto(live_server + "/experiments/pipeline/run")
        form = page.locator("#shard-form")
        form.scroll_into_view_if_needed()
        assert_fits(page)
        gpipe = page.locator('.shard-panel[data-strategy="gpipe"]')
        form.locator(".shard-tabs").get_by_text("gpipe", exact=True).click()
        assert gpipe.is_visible()
        gpipe.locator('.shard-tile[data-name="head.weight"]').click()
        gpipe.locator(".shard-detail").get_by_text("rank 1: all of it").wait_for()
        form.locator(".shard-tabs").get_by_text("single", exact=True).click()
        assert page.locator('.shard-panel[data-strategy="single"]').is_visible()
        assert not gpipe.is_visible()
        assert owners(page, "single", "head.weight") == "rank 0: all of it (256 × 64)"
        assert_fits(page)
        screenshot(page, f"sharding-form-{device}")
        assert problems == []


def test_pick_each_strategy_by_keyboard_and_see_its_tiles(zero_run):
    """Every other strategy's panel is loaded when picked (Tab to its link, Enter), and
    a panel seen before comes back without asking the server again."""
    with hard_timeout(TEST_SECONDS), chromium_page("phone") as (page, problems):
        asked = []
        page.on("request", lambda r: asked.append(r.url) if "/sharding/" in r.url else None)
        page.goto(zero_run)
        names = page.locator("#shard-run .shard-links a").all_inner_texts()
        assert len(names) >= 4 and page.locator(".shard-panel").count() == 1
        for name in [*names[1:], names[0], names[1]]:
            page.locator("#shard-run .shard-links").get_by_role(
                "link", name=name, exact=True).focus()
            page.keyboard.press("Enter")
            panel = page.locator(f'.shard-panel[data-strategy="{name}"]')
            panel.wait_for()
            assert page.locator(".shard-panel").count() == 1
            assert panel.locator(".shard-tile").count() > 4
            assert panel.locator('.shard-tile[data-name="wte.weight"]').get_attribute(
                "data-owners")
            assert page.evaluate("document.activeElement.tagName") == "H3"
        assert sorted(set(asked)) == sorted(asked) and len(asked) == len(names)
        assert_fits(page)
        assert problems == []


def test_the_switch_works_without_javascript(zero_run):
    with hard_timeout(TEST_SECONDS), browser_context(java_script_enabled=False,
                                                     viewport={"width": 375, "height": 812}
                                                     ) as context:
        page = context.new_page()
        page.goto(zero_run)
        assert page.locator('.shard-panel[data-strategy="ddp"]').is_visible()
        page.locator("#shard-run .shard-links").get_by_role(
            "link", name="zero2", exact=True).click()  # the page that shows it
        page.wait_for_url("**?sharding=zero2#shard-run")
        assert page.locator('.shard-panel[data-strategy="zero2"]').is_visible()
        assert not page.locator('.shard-panel[data-strategy="ddp"]').is_visible()
        assert_fits(page)
        title = page.locator('.shard-panel[data-strategy="zero2"] .shard-tile').first \
            .get_attribute("title")
        assert "rank" in title
