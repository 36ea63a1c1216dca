"""kubus.api.quantity against kube's own table (apimachinery quantity_test.go) and properties."""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubus.api.quantity import (
    MAX_INT64,
    exact_quantity,
    milli_value,
    parse_quantity,
    resource_quantity,
    to_base_units,
    value,
)

NANO = F(1, 10**9)
Ki, Mi, Gi, Ti, Pi, Ei = (2**e for e in (10, 20, 30, 40, 50, 60))

# TestQuantityParse from k8s.io/apimachinery/pkg/api/resource/quantity_test.go: input -> value.
KUBE_PARSE_TABLE: list[tuple[str, F | int]] = [
    ("0", 0),
    ("0n", 0),
    ("0u", 0),
    ("0m", 0),
    ("0Ki", 0),
    ("0k", 0),
    ("0Mi", 0),
    ("0M", 0),
    ("0Gi", 0),
    ("0G", 0),
    ("0Ti", 0),
    ("0T", 0),
    # Quantity-less numbers are allowed
    ("1", 1),
    # Binary suffixes
    ("1Ki", Ki),
    ("8Ki", 8 * Ki),
    ("7Mi", 7 * Mi),
    ("6Gi", 6 * Gi),
    ("5Ti", 5 * Ti),
    ("4Pi", 4 * Pi),
    ("3Ei", 3 * Ei),
    ("10Ti", 10 * Ti),
    ("100Ti", 100 * Ti),
    # Decimal suffixes
    ("5n", 5 * NANO),
    ("4u", F(4, 10**6)),
    ("3m", F(3, 1000)),
    ("9", 9),
    ("8k", 8000),
    ("50k", 50_000),
    ("7M", 7 * 10**6),
    ("6G", 6 * 10**9),
    ("5T", 5 * 10**12),
    ("40T", 4 * 10**13),
    ("300T", 3 * 10**14),
    ("2P", 2 * 10**15),
    ("1E", 10**18),
    # Decimal exponents
    ("1E-3", F(1, 1000)),
    ("1e3", 1000),
    ("1E6", 10**6),
    ("1e9", 10**9),
    ("1E12", 10**12),
    ("1e15", 10**15),
    ("1E18", 10**18),
    # Nonstandard but still parsable
    ("1e14", 10**14),
    ("1e13", 10**13),
    ("100.035k", 100_035),
    # Things that look like floating point
    ("0.001", F(1, 1000)),
    ("0.0005k", F(1, 2)),
    ("0.005", F(5, 1000)),
    ("0.05", F(5, 100)),
    ("0.5", F(1, 2)),
    ("0.00050k", F(1, 2)),
    ("0.00500", F(5, 1000)),
    ("0.05000", F(5, 100)),
    ("0.50000", F(1, 2)),
    ("0.5e0", F(1, 2)),
    ("0.5e-1", F(5, 100)),
    ("0.5e-2", F(5, 1000)),
    ("10.035M", 10_035_000),
    ("1.2e3", 1200),
    ("1.3E+6", 1_300_000),
    ("1.40e9", 14 * 10**8),
    ("1.53E12", 153 * 10**10),
    ("1.6e15", 16 * 10**14),
    ("1.7E18", 17 * 10**17),
    ("9.01", F(901, 100)),
    ("8.1k", 8100),
    ("7.123456M", 7_123_456),
    ("6.987654321G", 6_987_654_321),
    ("5.444T", 5444 * 10**9),
    ("40.1T", 401 * 10**11),
    ("300.2T", 3002 * 10**11),
    ("2.5P", 25 * 10**14),
    ("1.01E", 101 * 10**16),
    # Things that saturate/round
    ("3.001n", 4 * NANO),
    ("1.1E-9", 2 * NANO),
    ("0.0000000001", NANO),
    ("0.0000000005", NANO),
    ("0.00000000050", NANO),
    ("0.5e-9", NANO),
    ("0.9n", NANO),
    ("0.00000012345", 124 * NANO),
    ("0.00000012354", 124 * NANO),
    ("9Ei", MAX_INT64),
    ("9223372036854775807Ki", MAX_INT64),
    ("12E", 12 * 10**18),
    # We'll accept fractional binary stuff, too.
    ("100.035Ki", F(10_243_584, 100)),
    ("0.5Mi", Mi // 2),
    ("0.05Gi", F(536_870_912, 10)),
    ("0.025Ti", F(274_877_906_944, 10)),
    # Things written by trolls
    ("0.000000000001Ki", 2 * NANO),
    (".001", F(1, 1000)),
    (".0001k", F(1, 10)),
    ("1.", 1),
    ("1.G", 10**9),
]


@pytest.mark.parametrize(("text", "expected"), KUBE_PARSE_TABLE)
def test_parse_kube_table(text: str, expected: F | int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(("text", "expected"), KUBE_PARSE_TABLE)
def test_parse_kube_table_negated_and_explicit_plus(text: str, expected: F | int) -> None:
    assert parse_quantity("-" + text) == -expected
    assert parse_quantity("+" + text) == expected


# TestQuantityParse's invalid list, with kubus's messages.
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.1.M", 'quantity "1.1.M" is not valid'),
        ("1+1.0M", 'quantity "1+1.0M" is not valid'),
        ("0.1mi", 'quantity "0.1mi" is not valid: unknown suffix "mi"'),
        ("0.1am", 'quantity "0.1am" is not valid'),
        ("aoeu", 'quantity "aoeu" is not valid'),
        (".5i", 'quantity ".5i" is not valid: unknown suffix "i"'),
        ("1i", 'quantity "1i" is not valid: unknown suffix "i"'),
        ("-3.01i", 'quantity "-3.01i" is not valid: unknown suffix "i"'),
        ("-3.01e-", 'quantity "-3.01e-" is not valid: unknown suffix "e-"'),
        # trailing and leading whitespace is forbidden
        (" 1", 'quantity " 1" is not valid'),
        ("1 ", 'quantity "1 " is not valid'),
        ("", 'quantity "" is not valid: it is empty'),
        # More from kube's grammar
        ("abc", 'quantity "abc" is not valid'),
        ("1K", 'quantity "1K" is not valid: unknown suffix "K"'),
        ("1KiB", 'quantity "1KiB" is not valid'),
        ("1e", 'quantity "1e" is not valid: unknown suffix "e"'),
        ("1eE3", 'quantity "1eE3" is not valid: unknown suffix "eE3"'),
        ("1Ki3", 'quantity "1Ki3" is not valid: unknown suffix "Ki3"'),
        ("1.5 cores", 'quantity "1.5 cores" is not valid'),
        ("1,5", 'quantity "1,5" is not valid'),
        ("--1", 'quantity "--1" is not valid: it has no digits'),
        ("0x10", 'quantity "0x10" is not valid'),
        ("1_000", 'quantity "1_000" is not valid'),
        ("５", 'quantity "５" is not valid'),
        ("1e99999", 'quantity "1e99999" is not valid: exponent out of range'),
        ("1" * 5000, f'quantity "{"1" * 5000}" is not valid: too many digits'),
        # kube reads these as 0 (kubernetes/apimachinery#165); kubus refuses them.
        ("k", 'quantity "k" is not valid: it has no digits'),
        ("Mi", 'quantity "Mi" is not valid: it has no digits'),
        ("e3", 'quantity "e3" is not valid: it has no digits'),
        (".", 'quantity "." is not valid: it has no digits'),
        ("-", 'quantity "-" is not valid: it has no digits'),
        ("+", 'quantity "+" is not valid: it has no digits'),
        ("-.", 'quantity "-." is not valid: it has no digits'),
    ],
)
def test_parse_invalid(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_quantity(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, 0),
        (3, 3),
        (-2, -2),
        (2**70, 2**70),
        (0.5, F(1, 2)),
        (0.1, F(1, 10)),  # through repr: exactly 1/10, not the binary float
        (1.0, 1),
        (1e21, 10**21),
        (1e-7, F(1, 10**7)),
        (2.5e-10, NANO),  # finer than nano: rounded up, as kube does
        (-0.25, F(-1, 4)),
    ],
)
def test_parse_numbers(raw: int | float, expected: F | int) -> None:
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (True, "quantity must be a string or a number, got true"),
        (False, "quantity must be a string or a number, got false"),
        (float("nan"), 'quantity "nan" is not valid'),
        (float("inf"), 'quantity "inf" is not valid'),
        (None, "quantity must be a string or a number, got NoneType"),
        ([1], "quantity must be a string or a number, got list"),
    ],
)
def test_parse_wrong_types(raw: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_quantity(raw)  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "expected_value", "expected_milli"),
    [
        ("1", 1, 1000),
        ("1.5", 2, 1500),
        ("0.5", 1, 500),
        ("100m", 1, 100),
        ("0.1m", 1, 1),  # ceil(0.1) milli
        ("1001m", 2, 1001),
        ("1Ki", 1024, 1_024_000),
        ("1n", 1, 1),
        ("0", 0, 0),
        ("-1.5", -2, -1500),  # away from zero, as kube's Value() documents
        ("-0.1m", -1, -1),
        ("9.01", 10, 9010),  # TestQuantityRoundUp: 9.01 at scale 0 rounds to 10
    ],
)
def test_value_and_milli_value_round_up(text: str, expected_value: int, expected_milli: int) -> None:
    q = parse_quantity(text)
    assert value(q) == expected_value
    assert milli_value(q) == expected_milli


@pytest.mark.parametrize(
    ("resource", "raw", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", "1", 1000),
        ("cpu", 2, 2000),
        ("cpu", 0.5, 500),
        ("cpu", "0.1m", 1),
        ("cpu", "1e-3", 1),
        ("cpu", "250u", 1),
        ("cpu", " 1500m ", 1500),  # kube's JSON decoding trims whitespace first
        ("memory", "1Gi", Gi),
        ("memory", "1.5Gi", 3 * Gi // 2),
        ("memory", "128974848", 128_974_848),
        ("memory", "129e6", 129_000_000),
        ("memory", "129M", 129_000_000),
        ("memory", "123Mi", 123 * Mi),
        ("memory", "0.5", 1),
        ("memory", "9223372036854775807", MAX_INT64),
        ("memory", "7.999999999999999999Ei", MAX_INT64),  # 2**63 - 1.15: rounded up
        ("cpu", "9223372036854775807m", MAX_INT64),
        ("cpu", "9223372036854775.807", MAX_INT64),
        ("memory", 0, 0),
        ("pods", "110", 110),
        ("nvidia.com/gpu", 8, 8),
        ("hugepages-2Mi", "1Gi", Gi),
        ("ephemeral-storage", "200Gi", 200 * Gi),
        ("example.com/foo", "1k", 1000),
    ],
)
def test_to_base_units(resource: str, raw: str | int | float, expected: int) -> None:
    assert to_base_units(resource, raw) == expected


@pytest.mark.parametrize(
    ("resource", "raw", "message"),
    [
        ("cpu", "-1", 'quantity "-1" must not be negative'),
        ("memory", "-1Gi", 'quantity "-1Gi" must not be negative'),
        ("memory", -5, 'quantity "-5" must not be negative'),
        ("cpu", "9223372036854775807", 'quantity "9223372036854775807" is too large (more than 2^63-1 millicores)'),
        ("memory", "10E", 'quantity "10E" is too large (more than 2^63-1 bytes)'),
        ("cpu", "abc", 'quantity "abc" is not valid'),
        ("cpu", "", 'quantity "" is not valid: it is empty'),
        ("cpu", True, "quantity must be a string or a number, got true"),
    ],
)
def test_to_base_units_errors(resource: str, raw: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        to_base_units(resource, raw)  # type: ignore[arg-type]
    assert str(info.value) == message


HUGE_EI = "1000000000000000000000000000000Ei"


def test_exact_quantity_is_parse_quantity_without_kubes_cap() -> None:
    assert parse_quantity("9Ei") == MAX_INT64  # kube's ParseQuantity caps a binary suffix
    assert parse_quantity("-9Ei") == -MAX_INT64
    assert exact_quantity("9Ei") == 9 * Ei
    assert exact_quantity("-9Ei") == -9 * Ei
    assert exact_quantity(HUGE_EI) == 10**30 * Ei
    assert exact_quantity("1e1000") == 10**1000
    assert exact_quantity("100.035Ki") == parse_quantity("100.035Ki")


# Every resource is bounded alike: at most 2**63-1 in base units (milli-CPU for cpu), one more is
# too large. A binary suffix, which kube caps at 2**63-1, is no way around it.
BOUNDS = [
    # resource, the most it takes, one base unit more, its unit in the message
    ("cpu", "9223372036854775807m", "9223372036854775808m", " millicores"),
    ("cpu", "9223372036854775.807", "9223372036854775.808", " millicores"),
    ("memory", "9223372036854775807", "9223372036854775808", " bytes"),
    ("memory", "9223372036854775807", "8Ei", " bytes"),
    ("ephemeral-storage", "9223372036854775807", "9223372036854775808", " bytes"),
    ("hugepages-2Mi", "9223372036854775807", "8Ei", " bytes"),
    ("nvidia.com/gpu", "9223372036854775807", "9223372036854775808", ""),
    ("example.com/foo", "9223372036854775807", "9223372036854775808", ""),
    ("pods", "9223372036854775807", "9223372036854775808", ""),
]


@pytest.mark.parametrize(("resource", "most", "more", "unit"), BOUNDS)
def test_every_resource_is_bounded_at_int64_in_base_units(resource: str, most: str, more: str, unit: str) -> None:
    assert to_base_units(resource, most) == MAX_INT64
    assert resource_quantity(resource, most) == (MAX_INT64, exact_quantity(most))
    with pytest.raises(ValueError) as info:
        to_base_units(resource, more)
    assert str(info.value) == f'quantity "{more}" is too large (more than 2^63-1{unit})'


@pytest.mark.parametrize(
    ("resource", "raw", "message"),
    [
        ("memory", HUGE_EI, f'quantity "{HUGE_EI}" is too large (more than 2^63-1 bytes)'),
        ("cpu", HUGE_EI, f'quantity "{HUGE_EI}" is too large (more than 2^63-1 millicores)'),
        ("memory", "1e1000", 'quantity "1e1000" is too large (more than 2^63-1 bytes)'),
        ("cpu", "1e1000", 'quantity "1e1000" is too large (more than 2^63-1 millicores)'),
        ("ephemeral-storage", "9Ei", 'quantity "9Ei" is too large (more than 2^63-1 bytes)'),
        ("nvidia.com/gpu", 2**63, 'quantity "9223372036854775808" is too large (more than 2^63-1)'),
        ("memory", 1e19, 'quantity "1e+19" is too large (more than 2^63-1 bytes)'),
    ],
)
def test_too_large(resource: str, raw: str | int | float, message: str) -> None:
    with pytest.raises(ValueError) as info:
        to_base_units(resource, raw)
    assert str(info.value) == message


DECIMAL = {
    "n": F(1, 10**9),
    "u": F(1, 10**6),
    "m": F(1, 1000),
    "": F(1),
    "k": F(10**3),
    "M": F(10**6),
    "G": F(10**9),
    "T": F(10**12),
    "P": F(10**15),
    "E": F(10**18),
}
BINARY = {"Ki": Ki, "Mi": Mi, "Gi": Gi, "Ti": Ti, "Pi": Pi, "Ei": Ei}


@given(n=st.integers(min_value=0, max_value=10**12), suffix=st.sampled_from(sorted(DECIMAL)))
def test_integer_with_decimal_suffix(n: int, suffix: str) -> None:
    assert parse_quantity(f"{n}{suffix}") == n * DECIMAL[suffix]
    assert parse_quantity(f"-{n}{suffix}") == -n * DECIMAL[suffix]


@given(n=st.integers(min_value=0, max_value=10**12), suffix=st.sampled_from(sorted(BINARY)))
def test_integer_with_binary_suffix(n: int, suffix: str) -> None:
    assert parse_quantity(f"{n}{suffix}") == min(n * BINARY[suffix], MAX_INT64)


@given(
    whole=st.integers(min_value=0, max_value=10**6),
    frac=st.integers(min_value=0, max_value=999),
    exponent=st.integers(min_value=-6, max_value=12),
)
def test_decimal_with_exponent(whole: int, frac: int, exponent: int) -> None:
    exact = (whole + F(frac, 1000)) * F(10) ** exponent
    assert parse_quantity(f"{whole}.{frac:03d}e{exponent}") == exact
    assert parse_quantity(f"{whole}.{frac:03d}E{exponent:+d}") == exact


@given(n=st.integers(min_value=0, max_value=10**15))
def test_cpu_milli_round_trip(n: int) -> None:
    assert to_base_units("cpu", f"{n}m") == n
    assert to_base_units("cpu", n) == 1000 * n
    assert to_base_units("memory", f"{n}") == n


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=1e-9, max_value=1e15))
def test_floats_parse_as_their_repr(x: float) -> None:
    q = parse_quantity(x)
    assert q == parse_quantity(repr(x))
    # Within a nano of the decimal the float prints as (rounded up, never down).
    assert 0 <= q - F(repr(x)) < NANO
