"""segments/phones.py gives the phonenumbers library's answer, faster."""
from __future__ import annotations

import random

import phonenumbers
from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE

from pushengine.segments.phones import library_normalize, normalize_phone


def samples() -> list[str]:
    rnd = random.Random(15)
    codes = list(COUNTRY_CODE_TO_REGION_CODE)
    found = [str(rnd.choice(codes)) + "".join(rnd.choice("0123456789")
                                              for _ in range(rnd.randint(4, 13)))
             for _ in range(20000)]
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for kind in range(11):
            example = phonenumbers.example_number_for_type(region, kind)
            if example is not None:
                digits = phonenumbers.format_number(example, 0)[1:]
                found += [digits[:-3] + f"{rnd.randint(0, 999):03d}" for _ in range(8)]
    return found


def test_same_answer_as_the_library():
    numbers = samples()
    valid = 0
    for number in numbers:
        expected = library_normalize(number)
        assert normalize_phone(number) == expected, number
        valid += expected is not None
    assert valid > 5000      # the sample holds plenty of valid numbers


def test_formatting_characters_are_removed():
    assert normalize_phone("+7 (999) 555-11-11") == "79995551111"
    assert normalize_phone("1 (202) 555-0143") == library_normalize("12025550143")
    for bad in ("", "+", "abc", "7999555111a", "7" * 20, "٧٩٩٩٥٥٥١١١١"):
        assert normalize_phone(bad) is None
