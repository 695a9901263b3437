"""The ConfigMap key ``poolCoordinators``: pool -> coordinator URL, validated entry by entry."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.grouping import parse_grouping_config
from edgewatch.core.poolconfig import (
    MAX_POOLS,
    PoolCoordinators,
    check_coordinator_url,
    is_pool_name,
    parse_pool_coordinators,
)


@pytest.mark.parametrize("text", [None, "", "   \n", "null", "{}", "~"])
def test_empty_means_no_coordinator(text: str | None) -> None:
    parsed = parse_pool_coordinators(text)
    assert parsed == PoolCoordinators() and parsed.url_for("a") is None and parsed.url_for(None) is None


def test_a_mapping_as_the_playground_and_the_manifests_write_it() -> None:
    text = yaml.safe_dump({"a": "http://198.18.0.10:2379", "b": "https://etcd.b.example"})
    parsed = parse_pool_coordinators(text)
    assert dict(parsed.urls) == {"a": "http://198.18.0.10:2379", "b": "https://etcd.b.example:2379"}
    assert parsed.problems == () and parsed.url_for("a") == "http://198.18.0.10:2379"
    assert parsed.url_for("c") is None


def test_bad_entries_are_dropped_one_by_one_with_a_reason() -> None:
    text = "\n".join([
        "good: http://10.0.0.1:2379",
        "Bad_Pool: http://10.0.0.2:2379",
        "ftp: ftp://10.0.0.3:2379",
        "nohost: http://:2379",
        "port: http://10.0.0.4:99999",
        "zero: http://10.0.0.4:0",
        "path: http://10.0.0.5:2379/v3",
        "creds: http://u:p@10.0.0.6:2379",
        "number: 5",
        "list: [http://10.0.0.7:2379]",
        "empty: ''",
        "'7': http://10.0.0.8:2379",
        "host: http://bad_host!:2379",
    ])
    parsed = parse_pool_coordinators(text)
    assert dict(parsed.urls) == {"good": "http://10.0.0.1:2379", "7": "http://10.0.0.8:2379"}
    assert len(parsed.problems) == 11
    joined = "\n".join(parsed.problems)
    for words in ("Bad_Pool", "pool ftp: unsupported scheme", "pool nohost: no valid host", "pool port:",
                  "pool zero: port 0", "pool path:", "pool creds: credentials", "pool number:", "pool list:",
                  "pool empty:", "pool host:"):
        assert words in joined, words
    assert all("http://HOST:PORT" in p for p in parsed.problems if not p.startswith("pool name"))


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string", "42", "a: [unclosed", "\t: x\n  - y",
                                  123, b"a: http://x"])
def test_anything_but_a_mapping_is_refused_as_a_whole(text: object) -> None:
    with pytest.raises(ValueError):
        parse_pool_coordinators(text)


def test_too_many_pools_are_refused() -> None:
    text = "\n".join(f"p{i}: http://10.0.0.1:2379" for i in range(MAX_POOLS + 1))
    with pytest.raises(ValueError, match="at most"):
        parse_pool_coordinators(text)


@pytest.mark.parametrize(("url", "normal"), [
    ("http://10.0.0.5:2379", "http://10.0.0.5:2379"),
    ("  https://etcd.pool-a:32379/ ", "https://etcd.pool-a:32379"),
    ("http://etcd", "http://etcd:2379"),
    ("http://[fd00::5]:2379", "http://[fd00::5]:2379"),
    ("HTTP://ETCD.example:1", "http://etcd.example:1"),
])
def test_urls_are_normalised(url: str, normal: str) -> None:
    assert check_coordinator_url(url) == normal


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_url_check_never_raises_anything_but_value_error(text: str) -> None:
    try:
        out = check_coordinator_url(text)
    except ValueError as exc:
        assert "http://HOST:PORT" in str(exc)
    else:
        assert out.startswith(("http://", "https://"))


def test_pool_names() -> None:
    assert is_pool_name("a") and is_pool_name("factory-7") and is_pool_name("a" * 63)
    assert not any(is_pool_name(x) for x in ("", "A", "a.b", "a/b", "-a", "a" * 64, 5, None))


def test_the_grouping_parser_accepts_the_key_without_judging_it() -> None:
    # The controller and the agent both parse edgewatch-config with parse_grouping_config: a
    # ConfigMap with poolCoordinators (even a bad one) must not be refused there.
    config = parse_grouping_config({"grouping": "on", "poolCoordinators": "not: [valid"})
    assert config.enabled


def test_auto_pools_are_apart_from_urls() -> None:
    got = parse_pool_coordinators("a: auto\nb: http://198.18.0.1\nc: ' auto '\nd: Auto\n")
    assert got.auto == frozenset({"a", "c"})
    assert got.urls == {"b": "http://198.18.0.1:2379"} and got.url_for("a") is None
    assert got.invalid == frozenset({"d"})  # only the exact word: a typo is reported, not guessed
