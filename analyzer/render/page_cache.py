"""The HTML report page of a warm ``analyze``, kept in the cache file beside the report model.

A warm ``analyze --format json`` prints the model text the cache holds (analyzer/model/result_cache.py);
rendering the HTML page from that model again cost as much as the analysis (charts, templates,
importing jinja2), so without it a warm HTML report would cost what a cold one does.

The page is a pure function of the model, the templates (``templates/*``), the Vega bundle, the
code (``analyzer/*.py``, already in the result key) and jinja2/markupsafe. Of the model the page
shows ``generated_at``, and never the ingest block's run counters (``render_html.view_model``
drops ``result_cache.RUN_KEYS``), so every model found under one result key has the same page but
for ``generated_at``. The page is kept under the result key and a *variant* (a hash of the
templates, the bundle's name, i.e. vl-convert's version, and jinja2's and markupsafe's versions),
as text with two slots:

- ``generated_at``: the page is rendered with a token in its place; the token must only show
  where jinja2 autoescapes it as text (never inside ``<script>`` or ``<style>``, never altered by
  a filter), and a hit puts ``markupsafe.escape(generated_at)`` there: what autoescaping writes;
- ``bundle``: Vega, Vega-Lite and vega-embed (0.9 MB, the same in every page, written verbatim);
  a hit reads it from its file and checks its SHA-256 against the one the page was rendered
  with (the page's Content-Security-Policy carries its hash).

So a hit writes exactly the page that rendering the hit's model would, without importing
jinja2 or the chart code (tests/test_page_cache.py compares them byte for byte). The page is
kept zlib-compressed in the ``result_pages`` table (bounded like ``results``: only keys
``results`` still holds, at most ``result_cache.KEEP`` pages).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from functools import cache

from dslogs.analyzer.core.resources import templates_dir
from dslogs.analyzer.model import result_cache

PAGE_VERSION = 1  # the stored layout below
BUNDLE_DIR = "vendor"  # templates/vendor/: the bundle shipped with dslogs (package data)
CACHED_BUNDLE = "chart bundle"  # how an error names the bundle kept in the cache folder
SLOT_PREFIX = "dslogs-slot-"
SLOTS = ("generated_at", "bundle")


# -- the Vega bundle's file (render_html builds it when there is none) ---------------------------


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def bundle_file_name() -> str:
    return f"vega-bundle-{_version('vl-convert-python')}.js"


def read_bundle(name: str) -> str | None:
    """The bundle as shipped in templates/vendor/, else as kept in the user's cache folder; None
    when neither holds a whole one (a file that fails to read or looks cut short)."""
    from dslogs.analyzer.core.outfile import own_file
    from dslogs.analyzer.ingest import cache_home

    shipped = templates_dir() / BUNDLE_DIR / name
    # the cached one is checked only when it is needed (most installs ship it)
    for path in (shipped, None):
        path = path or own_file(cache_home() / name, CACHED_BUNDLE)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if "window.vegaEmbed=" in text:  # not an empty or foreign file
            return text
    return None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- the variant: what besides the model and the code makes the page -------------------------------


@cache
def variant() -> str:
    """The templates' bytes (not vendor/: the bundle is a slot), the bundle's name and the
    template engine's versions: a page kept under another variant is never used."""
    h = hashlib.sha256(f"html page {PAGE_VERSION}\0{bundle_file_name()}\0".encode())
    h.update(f"jinja2 {_version('jinja2')}\0markupsafe {_version('markupsafe')}\0".encode())
    for path in sorted(p for p in templates_dir().iterdir() if p.is_file()):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


# -- slots ----------------------------------------------------------------------------------------


def new_tokens() -> dict[str, str]:
    """Placeholders no log text can guess, unchanged by HTML escaping and JSON encoding."""
    salt = os.urandom(12).hex()
    return {name: f"{SLOT_PREFIX}{salt}-{name.replace('_', '-')}" for name in SLOTS}


def _inside(low: str, pos: int, tag: str) -> bool:
    """Whether position ``pos`` of the (lower-cased) page lies inside a <tag> element."""
    return low.rfind(f"<{tag}", 0, pos) > low.rfind(f"</{tag}", 0, pos)


def split_page(page: str, tokens: dict[str, str], bundle: str) -> list[str] | None:
    """The page rendered with ``tokens`` as [text, slot, text, slot, ..., text]; None when a
    token shows anywhere a plain fill would not reproduce the rendered page."""
    low = page.lower()
    if low.count(SLOT_PREFIX) != sum(page.count(t) for t in tokens.values()):
        return None  # a token altered on its way into the page (a filter, an escape)
    if page.count(tokens["bundle"]) != (1 if bundle else 0):
        return None
    for m in re.finditer(re.escape(tokens["generated_at"]), page):
        if _inside(low, m.start(), "script") or _inside(low, m.start(), "style"):
            return None  # escaped otherwise there (JSON, CSS): not a text slot
    names = {t: name for name, t in tokens.items()}
    parts = re.split("(" + "|".join(re.escape(t) for t in tokens.values()) + ")", page)
    return [names[p] if i % 2 else p for i, p in enumerate(parts)]


def fill(parts: list[str], generated_at, bundle: str) -> str:
    """The page: each slot replaced once by its value (values are never searched for slots)."""
    from markupsafe import escape

    values = {"generated_at": str(escape(generated_at)), "bundle": bundle}
    return "".join(values[p] if i % 2 else p for i, p in enumerate(parts))


# -- kept and found ----------------------------------------------------------------------------


def can_keep(model: dict) -> bool:
    """Whether ``model`` is one that result_cache just found or stored (its page can be kept)."""
    return result_cache.page_source(model)


def keep(model: dict, parts: list[str], bundle: str) -> bool:
    """Keep the page of ``model`` (``split_page``'s parts) in the cache file; False if it cannot."""
    payload = {
        "v": PAGE_VERSION,
        "bundle_sha256": _sha256(bundle) if bundle else "",
        "parts": parts,
    }
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return result_cache.store_page(
        model, variant(), zlib.compress(text.encode("utf-8", "surrogatepass"), 1)
    )


def cached_html(model: dict) -> str | None:
    """The report page of ``model`` as kept in the cache file, with this model's ``generated_at``;
    None when no page fits (then `render_html(model, keep=True)` renders and keeps it)."""
    blob = result_cache.stored_page(model, variant())
    if blob is None:
        return None
    try:
        payload = json.loads(zlib.decompress(blob).decode("utf-8", "surrogatepass"))
        parts, digest = payload["parts"], payload["bundle_sha256"]
    except (zlib.error, ValueError, KeyError, TypeError):
        return None  # damaged: rendered (and kept) again
    if payload.get("v") != PAGE_VERSION or not isinstance(parts, list) or len(parts) % 2 != 1:
        return None
    if any(not isinstance(p, str) or (i % 2 and p not in SLOTS) for i, p in enumerate(parts)):
        return None
    bundle = ""
    if digest:
        bundle = read_bundle(bundle_file_name())
        if bundle is None or _sha256(bundle) != digest:
            return None  # not the bundle the page was rendered with
    generated_at = model.get("generated_at") or ""  # as render_html.view_model passes it
    return fill(parts, generated_at, bundle)
