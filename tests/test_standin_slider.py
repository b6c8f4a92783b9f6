"""The stand-in's slider in a real browser (Debian's Chromium through Playwright): a person's
drag with the mouse or a finger, onto the gap, passes the browser's session; a drag beside the
gap gets a fresh puzzle and passes nothing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # a real Chromium

SEARCH = "/kns8s/defaultresult/index"


def drag(page, off: int = 0, *, touch: bool = False) -> None:
    """Drag the slider's handle right until the piece's left edge is ``off`` px from the gap's,
    in steps, as a hand does (a mouse, or a finger through the DevTools protocol's touch)."""
    handle = page.locator("#standin-slider").bounding_box()
    gap = int(page.locator("#standin-gap").get_attribute("data-x"))
    x0, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
    x1 = x0 + gap + off
    steps = [x0 + (x1 - x0) * i / 12 for i in range(13)]
    if not touch:
        page.mouse.move(x0, y)
        page.mouse.down()
        for x in steps[1:]:
            page.mouse.move(x, y)
            page.wait_for_timeout(25)
        page.mouse.up()
        return
    cdp = page.context.new_cdp_session(page)
    cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x0, "y": y}]})
    for x in steps[1:]:
        cdp.send(
            "Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": [{"x": x, "y": y}]}
        )
        page.wait_for_timeout(25)
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


@pytest.mark.parametrize("touch", [False, True], ids=["mouse", "touch"])
def test_a_drag_onto_the_gap_passes_and_one_beside_it_does_not(cnki_site, browser, touch):
    site = cnki_site(seed=3, human_check=True)
    context = browser.new_context(has_touch=touch, viewport={"width": 600, "height": 500})
    page = context.new_page()
    try:
        page.goto(site.base_url + SEARCH)
        assert "/verify/home" in page.url
        drag(page, off=25, touch=touch)  # beside the gap: a fresh puzzle, marked failed
        page.wait_for_selector("#standin-failed")
        assert "/verify/home" in page.url and "failed=1" in page.url
        assert site.stats()["human_passes"] == 0
        assert site.stats()["human_check_failed"] == 1
        drag(page, touch=touch)
        page.wait_for_url(site.base_url + SEARCH)
        assert page.locator("#classid").count() == 1  # the search page: the session passed
        assert site.stats()["human_passes"] == 1
    finally:
        context.close()
