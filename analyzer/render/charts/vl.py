"""Vega-Lite specs as plain dicts, through the small part of altair's API the report's charts use.

`dslogs.analyzer.render.charts.specs` builds a dozen specs per report. altair costs a third of a second to import
and validates each spec against the Vega-Lite schema in `to_dict()` (half of its time); the
specs are ours and fixed in shape, so this module writes the same dicts directly:

    Chart(Data(values=rows)).mark_line(point=True).encode(x=X("bucket:T", title="time"),
        y="count:Q", tooltip=["bucket:T", Tooltip("count:Q", format=",")]).properties(width=400)

`layer`, `hconcat`, `vconcat` (and `a + b`) combine charts; data shared by every part is written
once on the parent, as altair does; variable params (`param`) move to the top level, where
Vega-Lite wants them. Nothing here validates: a wrong key shows in the browser test.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.4.1.json"
_TYPES = {"Q": "quantitative", "T": "temporal", "N": "nominal", "O": "ordinal"}
_NO_TYPE = {"x2", "y2"}  # secondary channels take their type from x / y


def shorthand(text: str) -> dict:
    """`field:Q` → {"field": "field", "type": "quantitative"} (a bare field keeps no type)."""
    name, sep, code = text.rpartition(":")
    if sep and code in _TYPES:
        return {"field": name, "type": _TYPES[code]}
    return {"field": text}


class _Def(dict):
    """A keyword-argument object (Scale, Axis, Legend, …): its dict is its spec."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(kw)


class Scale(_Def):
    pass


class Axis(_Def):
    pass


class Legend(_Def):
    pass


class OverlayMarkDef(_Def):
    pass


class TitleParams(_Def):
    pass


def Step(step: int) -> dict:  # noqa: N802 (altair's name)
    """A discrete axis sized per band (``height=Step(22)``)."""
    return {"step": step}


class _Channel(dict):
    def __init__(self, field: str | None = None, **kw: Any) -> None:
        super().__init__(shorthand(field) if field else {})
        self.update(kw)


class X(_Channel):
    pass


class Y(_Channel):
    pass


class Color(_Channel):
    pass


class StrokeDash(_Channel):
    pass


class Tooltip(_Channel):
    pass


def ExprRef(expr: str) -> dict:  # noqa: N802 (altair's name, so chart code reads the same)
    return {"expr": expr}


def param(name: str, value: Any = None) -> dict:
    return {"name": name, "value": value}


def selection_interval(name: str, encodings: list[str]) -> dict:
    return {"name": name, "select": {"type": "interval", "encodings": list(encodings)}}


class Data:
    def __init__(self, values: list[dict]) -> None:
        self.values = values

    def to_dict(self) -> dict:
        return {"values": self.values}


def _channel(name: str, value: Any) -> Any:
    if isinstance(value, str):
        d = shorthand(value)
    elif isinstance(value, list):
        return [_channel(name, v) for v in value]
    else:
        d = dict(value)
    if name in _NO_TYPE:
        d.pop("type", None)
    return d


class _Spec:
    data: Data | None = None

    def __init__(self) -> None:
        self.props: dict[str, Any] = {}

    def properties(self, **kw: Any) -> _Spec:
        out = self._copy()
        out.props.update(kw)
        return out

    def __add__(self, other: _Spec) -> LayerChart:
        return layer(self, other)

    def to_dict(self) -> dict:
        spec = self._dict()
        lifted = _lift_variable_params(spec, top=True)
        if lifted:
            spec["params"] = [*spec.get("params", []), *lifted]
        spec["$schema"] = SCHEMA
        return spec

    def _copy(self) -> _Spec:  # pragma: no cover - overridden
        raise NotImplementedError

    def _dict(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError


class Chart(_Spec):
    def __init__(self, data: Data | None = None) -> None:
        super().__init__()
        self.data = data
        self.mark: dict | None = None
        self.encoding: dict[str, Any] = {}
        self.transform: list[dict] = []
        self.params: list[dict] = []

    def _copy(self) -> Chart:
        out = Chart(self.data)
        out.mark, out.encoding = self.mark, dict(self.encoding)
        out.transform, out.params, out.props = list(self.transform), list(self.params), dict(self.props)
        return out

    def _mark(self, kind: str, kw: dict) -> Chart:
        out = self._copy()
        out.mark = {"type": kind, **kw}
        return out

    def mark_line(self, **kw: Any) -> Chart:
        return self._mark("line", kw)

    def mark_bar(self, **kw: Any) -> Chart:
        return self._mark("bar", kw)

    def mark_area(self, **kw: Any) -> Chart:
        return self._mark("area", kw)

    def mark_rule(self, **kw: Any) -> Chart:
        return self._mark("rule", kw)

    def mark_point(self, **kw: Any) -> Chart:
        return self._mark("point", kw)

    def encode(self, **channels: Any) -> Chart:
        out = self._copy()
        out.encoding.update({k: _channel(k, v) for k, v in channels.items()})
        return out

    def transform_fold(self, fields: list[str], as_: list[str]) -> Chart:
        out = self._copy()
        out.transform.append({"fold": list(fields), "as": list(as_)})
        return out

    def transform_filter(self, expr: str) -> Chart:
        out = self._copy()
        out.transform.append({"filter": expr})
        return out

    def add_params(self, *params: dict) -> Chart:
        out = self._copy()
        out.params += [dict(p) for p in params]
        return out

    def _dict(self, with_data: bool = True) -> dict:
        spec: dict[str, Any] = {}
        if with_data and self.data is not None:
            spec["data"] = self.data.to_dict()
        if self.mark is not None:
            spec["mark"] = dict(self.mark)
        if self.encoding:
            spec["encoding"] = dict(self.encoding)
        if self.transform:
            spec["transform"] = list(self.transform)
        if self.params:
            spec["params"] = list(self.params)
        spec.update(self.props)
        return spec


class _Compound(_Spec):
    key = ""

    def __init__(self, parts: list[_Spec]) -> None:
        super().__init__()
        self.parts = parts
        shared = parts[0].data if parts else None
        # data every part shares is written once, on the parent
        self.data = shared if shared is not None and all(p.data is shared for p in parts) else None

    def _copy(self) -> _Compound:
        out = type(self)(list(self.parts))
        out.props = dict(self.props)
        return out

    def _dict(self, with_data: bool = True) -> dict:
        spec: dict[str, Any] = {}
        if with_data and self.data is not None:
            spec["data"] = self.data.to_dict()
        spec[self.key] = [p._dict(with_data=self.data is None) for p in self.parts]
        spec.update(self.props)
        return spec


class LayerChart(_Compound):
    key = "layer"

    def __add__(self, other: _Spec) -> LayerChart:
        return layer(*self.parts, other)


class HConcatChart(_Compound):
    key = "hconcat"


class VConcatChart(_Compound):
    key = "vconcat"


def layer(*charts: _Spec) -> LayerChart:
    return LayerChart(list(charts))


def hconcat(*charts: _Spec) -> HConcatChart:
    return HConcatChart(list(charts))


def vconcat(*charts: _Spec) -> VConcatChart:
    return VConcatChart(list(charts))


def _lift_variable_params(spec: dict, top: bool) -> list[dict]:
    """Take variable params (no `select`) out of nested specs; Vega-Lite only has them on top."""
    lifted: list[dict] = []
    for key in ("layer", "hconcat", "vconcat"):
        for part in spec.get(key) or []:
            params = part.get("params") or []
            keep = [p for p in params if "select" in p]
            lifted += [p for p in params if "select" not in p and p.get("name") not in {q.get("name") for q in lifted}]
            if params and not keep:
                del part["params"]
            elif params:
                part["params"] = keep
            lifted += [p for p in _lift_variable_params(part, top=False) if p.get("name") not in {q.get("name") for q in lifted}]
    return lifted


Parameter = dict  # a param is its dict
