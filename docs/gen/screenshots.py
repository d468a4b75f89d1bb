"""Screenshots of the built site for docs/screenshots/ (run once after `make docs`; committed).

    .venv/bin/python docs/gen/screenshots.py

Opens build/site/tutorial/first-study.html and build/site/studies/01_affinity_factorial.html
(the rendered notebook 01, scrolled to its Conclusions section) in Debian's headless Chromium (Playwright,
as tests/notebooks/test_docs_site.py does) and writes docs/screenshots/docs_tutorial.png and
docs/screenshots/docs_study_01.png.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "build" / "site"
SHOTS = REPO / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def main() -> int:
    from playwright.sync_api import sync_playwright

    pages = {"docs_tutorial.png": (SITE / "tutorial" / "first-study.html", None),
             "docs_study_01.png": (SITE / "studies" / "01_affinity_factorial.html", "Conclusions")}
    missing = [str(p) for p, _ in pages.values() if not p.is_file()]
    if missing:
        print(f"not built: {', '.join(missing)}; run `make docs` first", file=sys.stderr)
        return 1
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            for name, (path, text) in pages.items():
                page.goto(path.as_uri())
                if text:      # the heading at the top of the window: the conclusions, in words
                    page.locator(f"article h2:has-text('{text}')").first.evaluate("h => h.scrollIntoView()")
                page.screenshot(path=str(SHOTS / name))
                print(f"wrote {SHOTS / name}")
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
