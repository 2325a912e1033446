"""clean_json writes the text json.dumps(clean(obj), indent=2) writes, on every shape of value."""

import json
import math
import random
from datetime import date

import pytest

from dslogs.analyzer.core.jsonable import clean, clean_json


def stdlib(obj) -> str:
    return json.dumps(clean(obj), ensure_ascii=False, indent=2, allow_nan=False)


EDGES = [
    {}, [], (), "s", 1, -0.0, 2.0004999, float("nan"), float("inf"), None, True,
    {"a": {}}, {"a": []}, [[]], [{}], [[], {}, [1, {}]],
    {"a": 1.23456, "b": [1, 2.5, None, "x, y: z\n"], "c": {"d": {"e": float("-inf")}}},
    {1: 2, False: "f", None: [1], 2.5: {"x": ()}, 7: [3]},  # non-string keys, a nested one among them
    ("a", (1, 2)), {"é": ["\u2028\x00\"\\", {"k": [[], {}, [1]]}]},
    {"run": 1, "then": {"nested": 2}, "and": 3.14159, "more": [4, [5]], "end": "z"},
]  # fmt: skip


@pytest.mark.parametrize("obj", EDGES, ids=range(len(EDGES)))
def test_edges(obj):
    assert clean_json(obj) == stdlib(obj)


def test_random_trees():
    rnd = random.Random(36)

    def gen(depth):
        r = rnd.random()
        if depth > 4 or r < 0.5:
            return rnd.choice([None, True, False, rnd.randint(-(10**20), 10**20), rnd.random() * 10 ** rnd.randint(-5, 20),
                               float("nan"), -0.0, "q\"\\\t" + chr(rnd.randint(0, 0x2FFF))])  # fmt: skip
        if r < 0.75:
            return {f"{rnd.choice('abé ')}{i}": gen(depth + 1) for i in range(rnd.randint(0, 5))}
        return [gen(depth + 1) for _ in range(rnd.randint(0, 5))]

    for _ in range(2000):
        obj = gen(0)
        assert clean_json(obj) == stdlib(obj)


def test_not_json_raises_as_json_does():
    with pytest.raises(TypeError, match="not JSON serializable"):
        clean_json({"a": [1, {"d": date(2026, 1, 1)}]})


def recursive_clean(obj):
    """clean as defined: floats rounded to 3 decimals, NaN/inf None, containers walked."""
    if isinstance(obj, float):
        return round(obj, 3) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: recursive_clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [recursive_clean(v) for v in obj]
    return obj


class Half(float):
    """a float subclass (numpy's float64 is one): cleaned as a float"""


def test_clean_is_the_recursive_definition():
    rnd = random.Random(7)

    def gen(depth):
        if depth > 4 or rnd.random() < 0.5:
            return rnd.choice([None, True, 1, 2**70, rnd.random() * 1e6, float("nan"), float("-inf"), -0.0, "s",
                               Half(1.23456), (1.5555, 2)])  # fmt: skip
        if rnd.random() < 0.5:
            return {str(i): gen(depth + 1) for i in range(rnd.randint(0, 5))}
        return [gen(depth + 1) for _ in range(rnd.randint(0, 5))]

    for _ in range(3000):
        obj = gen(0)
        got, want = clean(obj), recursive_clean(obj)
        assert json.dumps(got) == json.dumps(want)
        assert repr(got) == repr(want)  # types too (-0.0, a subclass's round)
