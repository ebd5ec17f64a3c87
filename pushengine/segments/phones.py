"""Phone numbers: validation with the ``phonenumbers`` library, E.164 digits.

``phonenumbers.parse`` + ``is_valid_number`` run at about 8,000 numbers/s,
far below what an upload needs (SPEC 15: 100,000 rows/s). A number in a
contact file is already digits with the country code, so this module skips
the parser: it splits the country code, then applies the library's own
metadata (the same patterns and possible lengths, in the same order of
regions) through regexes compiled once per region and number length. The
answer is the library's answer: tests/segments/test_phones.py compares the
two on a large random sample of every country code. A number the fast path
cannot take exactly (a national number starting with 0, a non-geographic
country code) goes to ``phonenumbers`` itself.
"""
from __future__ import annotations

import re
from functools import lru_cache

import phonenumbers
from phonenumbers import PhoneMetadata
from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE

_STRIP = str.maketrans("", "", " +-()\t\u00a0")
_TYPES = ("mobile", "fixed_line", "premium_rate", "toll_free", "shared_cost", "voip",
          "personal_number", "pager", "uan", "voicemail")


def _desc_matches(desc, length: int) -> str | None:
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
        lead = self.meta.leading_digits if self.meta is not None else None
        self.leading = re.compile(lead) if lead else None

    @lru_cache(maxsize=64)
    def valid(self, length: int):
        """A function nsn -> bool: the library's number type is not UNKNOWN."""
        meta = self.meta
        general = _desc_matches(meta.general_desc, length) if meta is not None else None
        if general is None:
            return lambda nsn: False
        kinds = []
        for name in _TYPES:
            if name == "mobile" and meta.same_mobile_and_fixed_line_pattern:
                continue
            pattern = _desc_matches(getattr(meta, name), length)
            if pattern is not None:
                kinds.append(f"(?:{pattern})")
        if not kinds:
            return lambda nsn: False
        # the general description and one of the types, in one regex
        match = re.compile(f"(?=(?:{general})$)(?:{'|'.join(kinds)})").fullmatch
        return lambda nsn: match(nsn) is not None


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


def _slow(digits: str) -> str | None:
    try:
        number = phonenumbers.parse("+" + digits, None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number):
        return None
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)[1:]


_VALIDATORS: dict[tuple[str, int], object] = {}


def _validator(code: str, regions: tuple[str, ...], length: int):
    """nsn -> bool for national numbers of ``length`` digits after country
    code ``code``: the library's region choice, then its type check."""
    if len(regions) == 1:
        return _region(regions[0]).valid(length)
    steps = [(r.leading.match if r.leading is not None else None, r.valid(length))
             for r in map(_region, regions) if r.meta is not None]

    def check(nsn: str) -> bool:
        for leading, valid in steps:
            if leading is not None:
                if leading(nsn):
                    return valid(nsn)
            elif valid(nsn):
                return True
        return False
    return check


def normalize_phone(text: str) -> str | None:
    """``+7 (999) 555-11-11`` -> ``79995551111``; None when it is not a valid
    number with its country code."""
    digits = text.translate(_STRIP)
    if not digits.isdigit() or not digits.isascii() or not 4 <= len(digits) <= 17:
        return None
    for size in (1, 2, 3):
        code = digits[:size]
        regions = _CODES.get(code)
        if regions is not None:
            break
    else:
        return _slow(digits)    # no geographic code: the library decides
    if digits[size] == "0":
        return _slow(digits)
    key = (code, len(digits) - size)
    check = _VALIDATORS.get(key)
    if check is None:
        check = _VALIDATORS[key] = _validator(code, regions, key[1])
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
