"""The report model as text in each format: what ``dslogs analyze`` writes and the Python API's
``Report.save`` and ``_repr_html_`` show, one function for both."""

from __future__ import annotations

FORMATS = ("html", "json", "md")


def render_report(model: dict, fmt: str) -> str:
    """``model`` (dslogs.report/1) as ``fmt``: html (self-contained page), json or md."""
    if fmt == "json":
        from dslogs.analyzer.model.report import report_to_json
        from dslogs.analyzer.model.result_cache import json_text

        # a model found in the result cache prints the very text it was kept as
        return json_text(model) or report_to_json(model)
    if fmt == "md":
        from dslogs.analyzer.render.markdown import render_markdown

        return render_markdown(model)
    if fmt == "html":
        # A warm run writes the page kept with the model (no jinja2 or chart code imported);
        # else the page is rendered, and kept with the model when it came from the cache.
        from dslogs.analyzer.render.page_cache import cached_html

        page = cached_html(model)
        if page is None:
            from dslogs.analyzer.render.html import render_html

            page = render_html(model, keep=True)
        return page
    from dslogs.analyzer.core.errors import UsageError

    raise UsageError(f"unknown report format {fmt!r}; valid: {', '.join(FORMATS)}")


def render_capacity(model: dict, fmt: str) -> str:
    """The capacity model (dslogs.capacity/1) as ``fmt``: what ``dslogs capacity`` writes and the
    Python API's ``Capacity.save`` and ``_repr_html_`` show."""
    if fmt == "json":
        from dslogs.analyzer.model.report import report_to_json

        return report_to_json(model)
    if fmt == "md":
        from dslogs.analyzer.render.markdown import render_capacity_markdown

        return render_capacity_markdown(model)
    if fmt == "html":
        from dslogs.analyzer.render.html import render_capacity_html

        return render_capacity_html(model)
    from dslogs.analyzer.core.errors import UsageError

    raise UsageError(f"unknown capacity format {fmt!r}; valid: {', '.join(FORMATS)}")
