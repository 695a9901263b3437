"""The statement datagram's layout (``edgewatch.core.statementdatagram``): what is sealed opens to
the same fields under the same key, and any other key, any changed byte or size is refused with a
``Rejected`` reason, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.core.liveness import DATAGRAM_SIZE
from edgewatch.core.rejection import Rejected
from edgewatch.core.statementdatagram import MAX_SIZE, MIN_SIZE, StatementDatagram, open_statement, seal_statement

U32 = st.integers(1, 0xFFFFFFFF)
KEY = b"k" * 32


@given(epoch=U32, echo_epoch=U32, echo=U32, age_ms=st.integers(0, 0xFFFFFFFF),
       statement=st.binary(min_size=2, max_size=MAX_SIZE - 36))
def test_a_sealed_statement_opens_to_its_fields(epoch: int, echo_epoch: int, echo: int, age_ms: int,
                                                statement: bytes) -> None:
    fields = StatementDatagram(epoch=epoch, echo_epoch=echo_epoch, echo=echo, age_ms=age_ms, statement=statement)
    data = seal_statement(fields, key=KEY)
    assert MIN_SIZE <= len(data) <= MAX_SIZE and len(data) != DATAGRAM_SIZE
    assert open_statement(data, key=KEY) == fields


@given(data=st.data())
def test_a_changed_byte_another_key_or_size_is_refused(data: st.DataObject) -> None:
    sealed = seal_statement(StatementDatagram(epoch=1, echo_epoch=2, echo=3, age_ms=4, statement=b'{"v":4}'), key=KEY)
    at = data.draw(st.integers(0, len(sealed) - 1))
    flipped = sealed[:at] + bytes([sealed[at] ^ data.draw(st.integers(1, 255))]) + sealed[at + 1:]
    for bad, key in ((flipped, KEY), (sealed, b"x" * 32), (sealed[:-1], KEY), (sealed + b"\x00", KEY),
                     (data.draw(st.binary(max_size=2 * MAX_SIZE)), KEY)):
        with pytest.raises(Rejected):
            open_statement(bad, key=key)


@pytest.mark.parametrize("field", ["epoch", "echo_epoch", "echo"])
def test_zero_epochs_and_echoes_are_not_a_statement_datagram(field: str) -> None:
    with pytest.raises(ValueError):
        StatementDatagram(**{"epoch": 1, "echo_epoch": 1, "echo": 1, "age_ms": 0, "statement": b"{}", field: 0})


def test_a_statement_too_large_for_one_datagram_is_refused_at_the_sender() -> None:
    with pytest.raises(ValueError):
        StatementDatagram(epoch=1, echo_epoch=1, echo=1, age_ms=0, statement=b"x" * (MAX_SIZE - 35))
