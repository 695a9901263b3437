"""Kubernetes label and field selectors: parse the query strings clients send, match objects.

What it is for
    The node-local pool cache (:mod:`edgewatch.poolcache.store`) filters lists and watches the way
    kube-apiserver does. kube-proxy watches EndpointSlices and Services with
    ``labelSelector=!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name``;
    kubectl sends ``-l`` and ``--field-selector`` as typed.

Label selectors (the grammar of apimachinery's ``labels.Parse``)
    Requirements joined by ``,`` (AND): ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
    ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not exist), ``k>3``, ``k<3`` (integer
    comparison). Spaces around tokens are ignored. ``k!=v`` and ``k notin (...)`` also match
    objects without the label, as in Kubernetes. Keys are ``[prefix/]name`` (prefix a DNS
    subdomain up to 253 characters, name up to 63), values up to 63 characters and may be empty.
    The empty selector matches everything.

Field selectors (the grammar of apimachinery's ``fields.ParseSelector``)
    Terms joined by ``,`` (AND): ``field=value``, ``field==value``, ``field!=value``; ``\\,``,
    ``\\=`` and ``\\\\`` escape those characters in values. Only the fields the caller allows
    (``metadata.name`` and ``metadata.namespace`` by default, what every resource supports in
    kube-apiserver) are accepted.

Limits
    Pure: no I/O. Selectors longer than :data:`MAX_SELECTOR_LENGTH` characters are refused (the
    string comes from an untrusted client). Errors are :class:`SelectorError` with a message fit
    for a 400 BadRequest ``Status``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_FIELDS",
    "FieldRequirement",
    "FieldSelector",
    "LabelRequirement",
    "LabelSelector",
    "MAX_SELECTOR_LENGTH",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
]

MAX_SELECTOR_LENGTH: Final = 8192
"""Longest selector string accepted, in characters."""

DEFAULT_FIELDS: Final = ("metadata.name", "metadata.namespace")
"""The field selector labels every resource supports."""

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INTEGER = re.compile(r"-?[0-9]+")
_SPECIAL = frozenset("!=<>(),")  # characters that end an identifier (besides whitespace)


class SelectorError(ValueError):
    """A label or field selector is not valid; the message says where and why."""


@dataclass(frozen=True)
class LabelRequirement:
    """One requirement of a label selector.

    Attributes:
        key: the label key.
        op: one of ``=`` (``==`` is parsed to it), ``!=``, ``in``, ``notin``, ``exists``, ``!``
            (does not exist), ``>``, ``<``.
        values: the compared values (one for ``=``, ``!=``, ``>``, ``<``; a set for ``in`` /
            ``notin``; none for ``exists`` / ``!``).
    """

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (Kubernetes semantics)."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        # > and <: the label must hold an integer (as apimachinery requires)
        if not present or not _INTEGER.fullmatch(labels[self.key]):
            return False
        have, want = int(labels[self.key]), int(next(iter(self.values)))
        return have > want if self.op == ">" else have < want


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: all requirements must hold (empty: everything matches)."""

    requirements: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels (None: no labels) is selected."""
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements


@dataclass(frozen=True)
class FieldRequirement:
    """One term of a field selector: ``field`` ``op`` (``=`` or ``!=``) ``value``."""

    field: str
    op: str
    value: str


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: all terms must hold (empty: everything matches)."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether an object whose selectable fields are ``fields`` is selected (a field the
        object lacks counts as the empty string, as in kube-apiserver)."""
        for r in self.requirements:
            equal = fields.get(r.field, "") == r.value
            if equal != (r.op == "="):
                return False
        return True

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements


def _check_length(text: str) -> None:
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"selector longer than {MAX_SELECTOR_LENGTH} characters")


def _tokens(text: str) -> list[tuple[str, str]]:
    """Split a label selector into (kind, text) tokens; kind is ``id`` or the operator itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=!" and text[i + 1:i + 2] == "=":
            out.append((c + "=", c + "="))
            i += 2
        elif c in _SPECIAL:
            out.append((c, c))
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(("id", text[i:j]))
            i = j
    return out


def _check_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise SelectorError(f"invalid label key {key!r}: the prefix must be a DNS subdomain")
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        raise SelectorError(f"invalid label key {key!r}: the name must be 1-63 characters "
                            "of letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
    return key


def _check_value(value: str) -> str:
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise SelectorError(f"invalid label value {value!r}: at most 63 characters of letters, digits, "
                            "'-', '_' or '.', starting and ending with a letter or digit")
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.pos] if self.pos < len(self.toks) else ("eos", "")

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        self.pos += 1
        return tok

    def expect(self, kind: str, what: str) -> str:
        got_kind, got = self.take()
        if got_kind != kind:
            raise SelectorError(f"found {got!r}, expected {what}")
        return got

    def requirement(self) -> LabelRequirement:
        if self.peek()[0] == "!":
            self.take()
            return LabelRequirement(_check_key(self.expect("id", "a label key")), "!")
        key = _check_key(self.expect("id", "a label key or '!'"))
        kind, word = self.peek()
        if kind in ("eos", ","):
            return LabelRequirement(key, "exists")
        self.take()
        if kind in ("=", "==", "!="):
            value = ""
            if self.peek()[0] == "id":
                value = self.take()[1]
            elif self.peek()[0] not in ("eos", ","):
                raise SelectorError(f"found {self.peek()[1]!r}, expected a value after {key}{word}")
            return LabelRequirement(key, "!=" if kind == "!=" else "=", frozenset({_check_value(value)}))
        if kind in ("<", ">"):
            value = self.expect("id", "an integer")
            if not _INTEGER.fullmatch(value):
                raise SelectorError(f"{key}{kind}{value}: {value!r} is not an integer")
            return LabelRequirement(key, kind, frozenset({value}))
        if kind == "id" and word in ("in", "notin"):
            return LabelRequirement(key, word, self.value_set())
        raise SelectorError(f"found {word!r} after key {key!r}, expected '=', '==', '!=', 'in', 'notin', "
                            "'<', '>', ',' or the end")

    def value_set(self) -> frozenset[str]:
        self.expect("(", "'('")
        values: set[str] = set()
        while True:
            kind, word = self.peek()
            if kind == "id":
                values.add(_check_value(word))
                self.take()
                kind, word = self.peek()
            else:  # an empty entry, as apimachinery allows: "in (a,,b)", "in ()"
                values.add("")
            if kind == ")":
                self.take()
                return frozenset(values)
            if kind != ",":
                raise SelectorError(f"found {word!r}, expected ',' or ')' in a value list")
            self.take()


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value.

    Args:
        text: the selector; None or blank selects everything.

    Returns:
        The selector; requirements keep their order of appearance.

    Raises:
        SelectorError: the text does not follow the grammar (module docstring), a key or value is
            invalid, or it is longer than :data:`MAX_SELECTOR_LENGTH`.
    """
    if text is None or not text.strip():
        return LabelSelector()
    _check_length(text)
    parser = _Parser(text)
    reqs = [parser.requirement()]
    while parser.peek()[0] != "eos":
        parser.expect(",", "',' or the end")
        reqs.append(parser.requirement())
    return LabelSelector(tuple(reqs))


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid escape in field selector value {value!r}")
            out.append(value[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_field_selector(text: str | None, *, fields: Sequence[str] = DEFAULT_FIELDS) -> FieldSelector:
    """Parse a ``fieldSelector`` query value.

    Args:
        text: the selector; None or blank selects everything.
        fields: the field labels allowed (kube-apiserver answers 400 for others).

    Returns:
        The selector.

    Raises:
        SelectorError: a term is not ``field=value`` / ``field==value`` / ``field!=value``, a field
            is not in ``fields``, a value has a bad escape, or the text is too long.
    """
    if text is None or not text.strip():
        return FieldSelector()
    _check_length(text)
    reqs = []
    for term in _split_unescaped(text, ","):
        if not term:
            raise SelectorError(f"empty term in field selector {text!r}")
        at, op = _find_operator(term)
        if at < 0:
            raise SelectorError(f"invalid field selector term {term!r}: expected field=value, field==value "
                                "or field!=value")
        field, value = term[:at].strip(), term[at + len(op):]
        if field not in fields:
            raise SelectorError(f"field label not supported: {field!r} (supported: {', '.join(fields)})")
        reqs.append(FieldRequirement(field, "!=" if op == "!=" else "=", _unescape(value)))
    return FieldSelector(tuple(reqs))


def _find_operator(term: str) -> tuple[int, str]:
    """Position and text of the first unescaped ``!=``, ``==`` or ``=`` in a term; (-1, "") if none."""
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return i, op
        i += 1
    return -1, ""
