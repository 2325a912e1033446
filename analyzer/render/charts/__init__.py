"""Charts: plain Vega-Lite dicts registered with @chart, and their SVG."""
