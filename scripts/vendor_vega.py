"""Write the Vega bundle the HTML report inlines to templates/vendor/ (shipped as package data).

    .venv/bin/python scripts/vendor_vega.py

vl-convert builds the bundle in seconds of CPU; shipping it built keeps every report run from
paying that. The file is named after the vl-convert version it came from: with another version
installed, dslogs builds that one's bundle once into the user's cache folder instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dslogs.analyzer.render.html import BUNDLE_DIR, build_vega_bundle, bundle_file_name  # noqa: E402


def main() -> int:
    folder = ROOT / "templates" / BUNDLE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / bundle_file_name()
    for old in folder.glob("vega-bundle-*.js"):
        if old != target:
            old.unlink()
    target.write_text(build_vega_bundle(), encoding="utf-8")
    print(f"{target.relative_to(ROOT)}: {target.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
