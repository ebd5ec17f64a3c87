"""Phone numbers: validation with the ``phonenumbers`` library, E.164 digits.

``phonenumbers.parse`` + ``is_valid_number`` run at about 8,000 numbers/s,
far below what an upload needs (SPEC 15: 100,000 rows/s). A number in a
contact file is already digits with the country code, so this module skips
the parser: it splits the country code, then applies the library's own
metadata (the same patterns and possible lengths, in the same order of
regions) through one regex per country code and number length, compiled
once (the regions sharing a code folded into it). The
answer is the library's answer: tests/segments/test_phones.py compares the
two on a large random sample of every country code. A number the fast path
cannot take exactly (a national number starting with 0, a non-geographic
country code) goes to ``phonenumbers`` itself.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

import phonenumbers
from phonenumbers import PhoneMetadata, PhoneNumberDesc
from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE

_STRIP = str.maketrans("", "", " +-()\t\u00a0")
_TYPES = ("mobile", "fixed_line", "premium_rate", "toll_free", "shared_cost", "voip",
          "personal_number", "pager", "uan", "voicemail")


# nsn -> truthy when valid (a bound fullmatch: a match or None)
Validator = Callable[[str], object]


def _never(nsn: str) -> bool:
    return False


def _desc_matches(desc: PhoneNumberDesc | None, length: int) -> str | None:
    """The pattern of a number description for numbers of ``length`` digits
    (None: no number of that length can match it)."""
    if desc is None or not desc.national_number_pattern:
        return None
    lengths = desc.possible_length
    if lengths and length not in lengths:
        return None
    return desc.national_number_pattern


class _Region:
    def __init__(self, code: str) -> None:
        self.meta = PhoneMetadata.metadata_for_region(code, None)

    @lru_cache(maxsize=64)
    def pattern(self, length: int) -> str | None:
        """The regex (for fullmatch) of the national numbers of ``length``
        digits whose type the library finds (not UNKNOWN); None: none."""
        meta = self.meta
        if meta is None:
            return None
        general = _desc_matches(meta.general_desc, length)
        if general is None:
            return None
        kinds = []
        for name in _TYPES:
            if name == "mobile" and meta.same_mobile_and_fixed_line_pattern:
                continue
            pattern = _desc_matches(getattr(meta, name), length)
            if pattern is not None:
                kinds.append(f"(?:{pattern})")
        if not kinds:
            return None
        # the general description and one of the types, in one regex
        return f"(?=(?:{general})$)(?:{'|'.join(kinds)})"

    def valid(self, length: int) -> Validator:
        """A function nsn -> truthy when the library's number type is not
        UNKNOWN: the bound fullmatch itself (a match or None)."""
        pattern = self.pattern(length)
        return _never if pattern is None else re.compile(pattern).fullmatch


_REGIONS: dict[str, _Region] = {}


def _region(code: str) -> _Region:
    r = _REGIONS.get(code)
    if r is None:
        r = _REGIONS[code] = _Region(code)
    return r


def _fast_codes() -> dict[str, tuple[str, ...]]:
    """Country code (as text) -> regions, for the geographic codes."""
    return {str(cc): regions for cc, regions in COUNTRY_CODE_TO_REGION_CODE.items()
            if "001" not in regions}


_CODES = _fast_codes()


def _prefixes() -> dict[str, tuple[int, str, tuple[str, ...], dict[int, Validator]]]:
    """The first three digits -> (length of the country code, the code, its
    regions, its validators by total length): one look-up per number
    instead of up to three slices and look-ups."""
    table: dict[str, tuple[int, str, tuple[str, ...], dict[int, Validator]]] = {}
    for n in range(1000):
        head = f"{n:03d}"
        for size in (1, 2, 3):
            regions = _CODES.get(head[:size])
            if regions is not None:
                table[head] = (size, head[:size], regions, {})
                break
    return table


_PREFIX = _prefixes()


def _slow(digits: str) -> str | None:
    try:
        number = phonenumbers.parse("+" + digits, None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number):
        return None
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)[1:]


_VALIDATORS: dict[tuple[str, int], Validator] = {}


def _validator(code: str, regions: tuple[str, ...], length: int) -> Validator:
    """nsn -> bool for national numbers of ``length`` digits after country
    code ``code``: the library's region choice, then its type check."""
    if len(regions) == 1:
        return _region(regions[0]).valid(length)
    # the regions in the library's order, folded into one regex from the
    # last: a region with leading digits decides alone for the numbers
    # that start with them; one without is tried, then the next
    found = "(?!)"
    known = [(r, r.meta) for r in map(_region, regions) if r.meta is not None]
    for r, meta in reversed(known):
        mine = r.pattern(length) or "(?!)"
        lead = meta.leading_digits
        if lead:
            found = f"(?:(?={lead})(?:{mine})|(?!{lead})(?:{found}))"
        else:
            found = f"(?:{mine}|{found})"
    return re.compile(found).fullmatch


def normalize_phone(text: str) -> str | None:
    """``+7 (999) 555-11-11`` -> ``79995551111``; None when it is not a valid
    number with its country code."""
    digits = text.translate(_STRIP)
    length = len(digits)
    if not (digits.isascii() and digits.isdigit()) or not 4 <= length <= 17:
        return None
    entry = _PREFIX.get(digits[:3])
    if entry is None:
        return _slow(digits)    # no geographic code: the library decides
    size, code, regions, checks = entry
    if digits[size] == "0":
        return _slow(digits)
    check = checks.get(length)
    if check is None:
        key = (code, length - size)
        check = _VALIDATORS.get(key)
        if check is None:
            check = _VALIDATORS[key] = _validator(code, regions, key[1])
        checks[length] = check
    if check(digits[size:]):
        return digits
    # the library may still take it after rewriting it (a national prefix
    # transform): ask it; invalid numbers are rare in a contact file
    return _slow(digits)


def library_normalize(text: str) -> str | None:
    """The same answer through ``phonenumbers.parse`` (slow; for tests)."""
    digits = text.translate(_STRIP)
    if not digits.isdigit() or not digits.isascii():
        return None
    return _slow(digits)
