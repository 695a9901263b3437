"""Tests of edgewatch.poolcache.selectors: the label and field selector grammar of Kubernetes,
examples as kube-proxy / kubectl send them, and hypothesis round-trips against a model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.poolcache.selectors import (
    MAX_SELECTOR_LENGTH,
    FieldRequirement,
    LabelRequirement,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

KUBE_PROXY = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"


def test_kube_proxy_selector() -> None:
    sel = parse_label_selector(KUBE_PROXY)
    assert sel.requirements == (LabelRequirement("service.kubernetes.io/headless", "!"),
                                LabelRequirement("service.kubernetes.io/service-proxy-name", "!"))
    assert sel.matches({}) and sel.matches(None) and sel.matches({"app": "x"})
    assert not sel.matches({"service.kubernetes.io/headless": ""})
    assert not sel.matches({"service.kubernetes.io/service-proxy-name": "other"})


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("a=b", {"a": "b"}, True),
    ("a==b", {"a": "b"}, True),
    ("a = b", {"a": "c"}, False),
    ("a!=b", {}, True),            # != matches objects without the label
    ("a!=b", {"a": "b"}, False),
    ("a in (x, y)", {"a": "y"}, True),
    ("a in (x,y)", {}, False),
    ("a notin (x,y)", {}, True),   # notin matches objects without the label
    ("a notin (x,y)", {"a": "x"}, False),
    ("a", {"a": ""}, True),
    ("a", {"b": ""}, False),
    ("!a", {"b": ""}, True),
    ("a=", {"a": ""}, True),       # empty value
    ("a==", {"a": "x"}, False),
    ("a>3", {"a": "4"}, True),
    ("a>3", {"a": "3"}, False),
    ("a<3", {"a": "x"}, False),    # not an integer
    ("a=b,c in (d),!e", {"a": "b", "c": "d"}, True),
    ("a=b,c in (d),!e", {"a": "b", "c": "d", "e": "1"}, False),
    ("example.com/app=web", {"example.com/app": "web"}, True),
    ("", {"x": "y"}, True),
    ("  ", {}, True),
])
def test_label_examples(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


@pytest.mark.parametrize("text", [
    "a=b,", ",a=b", "a in b", "a in (b", "!", "a b", "a=(b)", "x/y/z=1", "-a=b", "a=b=c",
    "a>x", "Foo.com/a=b", "a=" + "v" * 64, "k" * 64, "a in (b c)", "a notin", "a!",
])
def test_label_errors(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_too_long_refused() -> None:
    with pytest.raises(SelectorError, match="longer"):
        parse_label_selector(",".join(["a=b"] * (MAX_SELECTOR_LENGTH // 3)))
    with pytest.raises(SelectorError, match="longer"):
        parse_field_selector("metadata.name=" + "x" * MAX_SELECTOR_LENGTH)


@pytest.mark.parametrize(("text", "fields", "expected"), [
    ("metadata.name=x", {"metadata.name": "x"}, True),
    ("metadata.name==x", {"metadata.name": "x"}, True),
    ("metadata.name!=x", {"metadata.name": "x"}, False),
    ("metadata.name=x,metadata.namespace=ns", {"metadata.name": "x", "metadata.namespace": "ns"}, True),
    ("metadata.name=x,metadata.namespace!=ns", {"metadata.name": "x", "metadata.namespace": "ns"}, False),
    (r"metadata.name=a\,b", {"metadata.name": "a,b"}, True),
    (r"metadata.name=a\=b", {"metadata.name": "a=b"}, True),
    ("metadata.name=", {"metadata.name": ""}, True),
    ("", {}, True),
])
def test_field_examples(text: str, fields: dict[str, str], expected: bool) -> None:
    assert parse_field_selector(text).matches(fields) is expected


@pytest.mark.parametrize("text", ["spec.clusterIP=1.2.3.4", "metadata.name", "metadata.name=a,", "x=y",
                                  r"metadata.name=a\b"])
def test_field_errors(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_field_selector(text)


def test_field_first_operator_wins() -> None:
    assert parse_field_selector("metadata.name=a!=b").requirements == (FieldRequirement("metadata.name", "=", "a!=b"),)


# --- properties --------------------------------------------------------------------------

_names = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?", fullmatch=True)
_keys = st.one_of(_names, st.builds(lambda p, n: f"{p}/{n}", st.from_regex(r"[a-z]{1,5}(\.[a-z]{1,5}){0,2}",
                                                                             fullmatch=True), _names))
_values = st.one_of(st.just(""), _names)
_requirements = st.one_of(
    st.builds(lambda k, op, v: LabelRequirement(k, op, frozenset({v})), _keys, st.sampled_from(["=", "!="]), _values),
    st.builds(lambda k, op, vs: LabelRequirement(k, op, frozenset(vs)), _keys, st.sampled_from(["in", "notin"]),
              st.sets(_names, min_size=1, max_size=3)),
    st.builds(lambda k, op: LabelRequirement(k, op), _keys, st.sampled_from(["exists", "!"])),
)
_space = st.sampled_from(["", " ", "  "])


@st.composite
def _rendered(draw: st.DrawFn) -> tuple[list[LabelRequirement], str]:
    reqs = draw(st.lists(_requirements, min_size=1, max_size=4))
    parts = []
    for r in reqs:
        sp = draw(_space)
        if r.op in ("=", "!="):
            op = draw(st.sampled_from(["=", "=="])) if r.op == "=" else "!="
            parts.append(f"{sp}{r.key}{sp}{op}{sp}{next(iter(r.values))}{sp}")
        elif r.op in ("in", "notin"):
            parts.append(f"{r.key} {r.op}{sp}({sp}{(sp + ',' + sp).join(sorted(r.values))}{sp})")
        elif r.op == "exists":
            parts.append(f"{sp}{r.key}{sp}")
        else:
            parts.append(f"{sp}!{sp}{r.key}")
    return reqs, ",".join(parts)


def _model(req: LabelRequirement, labels: dict[str, str]) -> bool:
    value = labels.get(req.key)
    return {"=": value in req.values, "in": value in req.values,
            "!=": value is None or value not in req.values, "notin": value is None or value not in req.values,
            "exists": value is not None, "!": value is None}[req.op]


@settings(max_examples=200, deadline=None)
@given(_rendered(), st.dictionaries(st.sampled_from(["a", "b", "x.io/c"]) | _keys, _values, max_size=4))
def test_label_round_trip_and_semantics(rendered: tuple[list[LabelRequirement], str], labels: dict[str, str]) -> None:
    reqs, text = rendered
    sel = parse_label_selector(text)
    assert list(sel.requirements) == reqs
    assert sel.matches(labels) == all(_model(r, labels) for r in reqs)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab/.=!,() in-x1")), max_size=30))
def test_label_parser_never_crashes(text: str) -> None:
    """Any text is either refused with SelectorError or parsed into a selector that can judge labels."""
    try:
        sel = parse_label_selector(text)
    except SelectorError as exc:
        assert str(exc)  # a refusal says why
    else:
        assert isinstance(sel.matches({}), bool) and isinstance(sel.matches({"a": "b"}), bool)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_field_parser_never_crashes(text: str) -> None:
    try:
        sel = parse_field_selector(text)
    except SelectorError:
        return
    assert all(r.field in ("metadata.name", "metadata.namespace") for r in sel.requirements)
