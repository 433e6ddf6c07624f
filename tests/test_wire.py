"""Tests for mcplite.core.wire: the one ISO 8601 timestamp every wire and log line uses."""

from __future__ import annotations

import datetime

import pytest

from mcplite.core.wire import iso_timestamp


def test_iso_timestamp_formats_the_epoch_in_utc_with_milliseconds() -> None:
    assert iso_timestamp(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso_timestamp(1704110400.0) == "2024-01-01T12:00:00.000Z"
    assert iso_timestamp(951782400.5) == "2000-02-29T00:00:00.500Z"


def test_iso_timestamp_is_right_on_both_sides_of_a_second_boundary() -> None:
    # Values exactly representable in binary: only the per-second cache is tested here.
    sequence = [
        (1704110399.75, "2024-01-01T11:59:59.750Z"),
        (1704110400.0, "2024-01-01T12:00:00.000Z"),
        (1704110400.25, "2024-01-01T12:00:00.250Z"),
        (1704110399.5, "2024-01-01T11:59:59.500Z"),  # back again: the cache must not stick
        (1704110400.5, "2024-01-01T12:00:00.500Z"),
        (1704153599.875, "2024-01-01T23:59:59.875Z"),  # across a day boundary
        (1704153600.0, "2024-01-02T00:00:00.000Z"),
        (1704067199.5, "2023-12-31T23:59:59.500Z"),  # across a year boundary
        (1704067200.0, "2024-01-01T00:00:00.000Z"),
    ]
    assert [iso_timestamp(epoch) for epoch, _ in sequence] == [iso for _, iso in sequence]


@pytest.mark.parametrize(
    "epoch",
    [
        1704110400.123,
        1704110400.001,
        1704110399.999,
        1704110400.5,
        1700000000.007,
        1735689599.999,
    ],
)
def test_iso_timestamp_gives_the_millisecond_that_datetime_gives(epoch: float) -> None:
    # 1704110400.123 is stored as 1704110400.12299990654...: truncating the float
    # difference shows .122, while datetime (and every reader of the epoch) says .123.
    expected = (
        datetime.datetime.fromtimestamp(epoch, datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
    assert iso_timestamp(epoch) == expected
