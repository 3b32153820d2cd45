"""Screenshots of a ``ceiling run`` report at 1280 px, one per part of the page, for docs/.

    python scripts/report_screenshots.py ceiling-run/report docs

Renders ``index.html`` in headless Chromium, finds where the sections start, and
cuts the full-page screenshot into ``report-rooflines.png`` (the top of the page
through the rooflines), ``report-kernels.png`` (the speedup charts and the start
of the kernels table) and ``report-isa.png`` (the static ISA table).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from html import unescape
from pathlib import Path

WIDTH = 1280
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--allow-file-access-from-files",
         "--virtual-time-budget=8000"]
# (file, first section, section it stops before, at most this many pixels)
PARTS = (("report-rooflines.png", "title", "ceilings", 2600), ("report-kernels.png", "kernels", "model", 1500),
         ("report-isa.png", "static", "templates", 1300))
PROBE = """<script>
window.addEventListener("load", () => {
  const top = {};
  for (const id of %s) top[id] = document.getElementById(id).getBoundingClientRect().top + window.scrollY;
  document.body.dataset.tops = JSON.stringify({tops: top, height: document.documentElement.scrollHeight});
});
</script></body>"""


def main(report: Path, out: Path) -> None:
    from PIL import Image

    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))))
    ids = sorted({i for _, a, b, _ in PARTS for i in (a, b)})
    page = report / "index.html"
    probe = report / "screenshot-probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE % json.dumps(ids)))
    try:
        dom = subprocess.run([chromium, *FLAGS, f"--window-size={WIDTH},2000", "--dump-dom", probe.resolve().as_uri()],
                             capture_output=True, text=True, timeout=300).stdout
    finally:
        probe.unlink()
    layout = json.loads(unescape(re.search(r'data-tops="([^"]*)"', dom).group(1)))
    with tempfile.TemporaryDirectory() as tmp:
        shot = Path(tmp) / "page.png"
        subprocess.run([chromium, *FLAGS, f"--window-size={WIDTH},{int(layout['height']) + 50}",
                        f"--screenshot={shot}", page.resolve().as_uri()], capture_output=True, timeout=300, check=True)
        image = Image.open(shot)
        out.mkdir(parents=True, exist_ok=True)
        for name, first, stop, most in PARTS:
            start = max(0, int(layout["tops"][first]) - 16)
            end = min(int(layout["tops"][stop]) - 8, start + most)
            image.crop((0, start, WIDTH, end)).save(out / name, optimize=True)
            print(out / name, f"{WIDTH}x{end - start}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
