"""The rules of a contact file, one by one (SPEC section 15)."""
from __future__ import annotations

import hashlib
import io

import pytest

from pushengine.segments.parse import SegmentError, read_segment
from pushengine.segments.store import MemorySegments


def upload(data: bytes, minimum: int = 1, **kw):
    """(counts, digests kept) or the SegmentError."""
    sink = MemorySegments().begin("t")
    try:
        counts = read_segment(io.BytesIO(data), sink, minimum=minimum, **kw)
    except SegmentError as e:
        return e, None
    return counts, sink.members


def sha(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def phones(n: int, start: int = 0) -> list[str]:
    return [f"7999{start + i:07d}" for i in range(n)]


def test_utf8_without_bom():
    counts, kept = upload("phone,email,name\n79995551111,Ivan@Example.RU ,Иван\n".encode())
    assert (counts.rows, counts.valid, counts.invalid, counts.duplicates) == (1, 2, 0, 0)
    assert kept == {sha("79995551111"), sha("ivan@example.ru")}


def test_utf8_with_bom():
    counts, kept = upload(b"\xef\xbb\xbf" + "phone,name\n79995551111,Иван\n".encode())
    assert counts.valid == 1 and kept == {sha("79995551111")}


def test_windows_1251():
    data = "email,name\nПётр@Почта.рф,Пётр\nx@y.ru,Иван\n".encode("cp1251")
    counts, kept = upload(data)
    assert counts.valid == 2
    assert sha("пётр@почта.рф") in kept and sha("x@y.ru") in kept


def test_a_byte_neither_encoding_reads_is_an_encoding_error_with_its_line():
    # 0x98 is undefined in Windows-1251; the file is not UTF-8 either
    data = "email,name\nx@y.ru,Иван\n".encode("cp1251") + b"z@y.ru,\x98\n"
    e, _ = upload(data)
    assert e.code == "encoding" and e.line == 3


def test_utf8_start_then_a_bad_byte_later():
    data = b"email\n" + b"a@b.ru\n" * 20000 + b"b@b.ru\xff\n"
    e, _ = upload(data)
    assert e.code == "encoding" and e.line == 20002


def test_semicolon_delimiter_is_a_header_validation_error():
    e, _ = upload(b"phone;email\n79995551111;a@b.ru\n")
    assert e.code == "header_validation" and e.line == 1 and "';'" in e.message


def test_no_phone_or_email_header():
    e, _ = upload(b"name,city\nIvan,Moscow\n")
    assert e.code == "header_validation" and e.line == 1


def test_empty_file():
    e, _ = upload(b"")
    assert e.code == "header_validation"


def test_quoted_headers_phone_and_email_are_accepted():
    counts, _ = upload(b'"phone","email"\n79995551111,a@b.ru\n')
    assert counts.valid == 2


def test_a_quoted_header_that_is_not_phone_or_email_is_refused():
    e, _ = upload(b'phone,"name"\n79995551111,Ivan\n')
    assert e.code == "header_validation" and "name" in e.message
    e, _ = upload(b'"phone;email"\n79995551111\n')
    assert e.code == "header_validation"


def test_header_names_ignore_case_and_spaces_and_other_columns():
    counts, _ = upload(b"Name, Phone ,EMAIL\nIvan,79995551111,a@b.ru\n")
    assert counts.valid == 2


def test_phone_header_twice():
    e, _ = upload(b"phone,phone\n1,2\n")
    assert e.code == "header_validation"


@pytest.mark.parametrize("written", ["+7 (999) 555-11-11", "79995551111", "7-999-555-11-11",
                                     " +7(999)5551111 "])
def test_phones_are_normalized_to_digits(written):
    counts, kept = upload(f'phone\n"{written}"\n'.encode())
    assert counts.valid == 1 and kept == {sha("79995551111")}


def test_invalid_phones_and_emails_are_counted():
    counts, _ = upload(b"phone,email\n12,not-an-email\n7999abc1111,@x.ru\n79995551111,\n")
    assert (counts.valid, counts.invalid) == (1, 4)


def test_duplicates_across_phone_and_email():
    rows = ["phone,email", "+7 (999) 555-11-11,a@b.ru", "79995551111,A@B.RU",
            "79995552222,c@d.ru", ",a@b.ru", "79995552222,"]
    counts, kept = upload(("\n".join(rows) + "\n").encode())
    # entries: 2 phones + 2 emails distinct; duplicated: 1 phone + 2 emails + 1 phone
    assert (counts.valid, counts.duplicates, counts.invalid) == (4, 4, 0)
    assert len(kept) == 4


def test_exactly_the_minimum_passes():
    data = ("phone\n" + "\n".join(phones(100)) + "\n").encode()
    counts, kept = upload(data, minimum=100)
    assert counts.valid == 100 and len(kept) == 100


def test_one_below_the_minimum_is_too_few_unique():
    # 99 distinct, one duplicate, one invalid: 99 < 100
    rows = phones(99) + [phones(1)[0], "123"]
    e, _ = upload(("phone\n" + "\n".join(rows) + "\n").encode(), minimum=100)
    assert e.code == "too_few_unique"
    assert (e.counts.valid, e.counts.invalid, e.counts.duplicates) == (99, 1, 1)
    assert e.line == 102
    body = e.as_json()["error"]
    assert body["valid"] == 99 and body["invalid"] == 1 and body["duplicates"] == 1


def test_only_digests_are_kept_never_a_raw_value():
    _, kept = upload(b"phone,email\n79995551111,a@b.ru\n")
    assert all(isinstance(d, bytes) and len(d) == 32 for d in kept)
    assert not any(b"7999" in d or b"a@b" in d for d in kept)


@pytest.mark.parametrize("algorithm", ["md5", "sha256"])
def test_prehashed_values(algorithm):
    h = hashlib.new(algorithm, b"79995551111").hexdigest()
    counts, kept = upload(f"phone\n{h.upper()}\n{h}\nnot-a-hash\n".encode(), hashed=algorithm)
    assert (counts.valid, counts.duplicates, counts.invalid) == (1, 1, 1)
    assert kept == {bytes.fromhex(h)}


def test_a_wrong_hash_name_is_refused():
    e, _ = upload(b"phone\n1\n", hashed="sha1")
    assert e.code == "bad_request"


# -- the fast path (blocks split with str.split) reads what csv.reader reads ----------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pushengine.segments import parse as parse_module  # noqa: E402

_plain = st.sampled_from([
    "79995551111", "+7 (999) 555-11-12", "89995551111", "", " ", "x", "A@B.ru", "a@b",
    "ё@ж.рф", "e@f.ru ", "79995551111", "1" * 40, "7999555111\t5", "abcdef0123456789" * 2])
_odd = st.sampled_from(['"7999555 1113"', '"a,b@c.ru"', '""', "7999\r5551114", "c@d.ru\r",
                        "\x00"])
_cells = st.one_of(_plain, _plain, _plain, _plain, _plain, _plain, _plain, _odd)
_lines = st.lists(st.lists(_cells, min_size=0, max_size=4).map(",".join), max_size=40)
_endings = st.sampled_from(["\n", "\r\n", "\r"])


def _csv_only(monkeypatch, data: bytes, **kw):
    """The same file read by csv.reader alone (the reference)."""
    def everything_to_csv(self):
        self.left, self.done = self.text.read(), True
    with monkeypatch.context() as m:
        m.setattr(parse_module._Batches, "run", everything_to_csv)
        return upload(data, **kw)


def _same(a, b):
    (ca, ka), (cb, kb) = a, b
    if isinstance(ca, SegmentError):
        assert isinstance(cb, SegmentError) and (ca.code, ca.line) == (cb.code, cb.line)
    else:
        assert ca == cb and ka == kb


@settings(max_examples=300, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(["phone,email", "email,name,phone", "name,phone", "email"]),
       lines=_lines, ending=st.sampled_from(["\n", "\r\n"]), odd=_endings,
       block=st.integers(1, 64), last=st.booleans(), hashed=st.booleans())
def test_fast_path_reads_what_csv_reads(monkeypatch, header, lines, ending, odd, block,
                                        last, hashed):
    text = header + ending + "".join(line + (odd if i % 7 == 6 else ending)
                                     for i, line in enumerate(lines))
    if not last and text.endswith(ending):
        text = text[:-len(ending)]
    data = text.encode("utf-8")
    kw = {"hashed": "md5"} if hashed else {}
    monkeypatch.setattr(parse_module, "BLOCK", block)    # many blocks, cut anywhere
    _same(upload(data, **kw), _csv_only(monkeypatch, data, **kw))


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_fast_path_on_a_large_plain_file(monkeypatch, ending):
    rows = "".join(f"User{i}@Example.com,+7 999 {i:07d}{ending}" for i in range(30_000))
    data = ("email,phone" + ending + rows + 'x,"79990000001"' + ending).encode()
    fast = upload(data)
    assert fast[0].valid == 60_000 and fast[0].rows == 30_001
    _same(fast, _csv_only(monkeypatch, data))


# -- SPEC 18: bounded lines, bounded memory, no NUL ------------------------------------

import tracemalloc  # noqa: E402

from pushengine.segments.parse import MAX_LINE  # noqa: E402


def _peak(data: bytes):
    """The outcome of reading ``data`` and the peak of memory allocated meanwhile."""
    stream = io.BytesIO(data)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        sink = MemorySegments().begin("t")
        try:
            outcome = read_segment(stream, sink, minimum=1)
        except SegmentError as e:
            outcome = e
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("data, line", [
    (b"phone\n" + b"7" * (40 << 20), 2),                             # no line break at all
    (b"phone\n79995551111\n" + b"7" * (40 << 20), 3),
    (b"phone\n" + b'"7999555"\n' + b"7" * (40 << 20) + b"\n", 3),    # on the csv path
    (b"phone," + b"x" * (40 << 20), 1),                              # the header line
    (b"phone\n" + b"79995551111\r" * 10 + b"1" * (40 << 20), 12),    # bare CRs, then none
])
def test_a_line_longer_than_the_bound_is_a_format_error_in_bounded_memory(data, line):
    """A body without line breaks used to be held about six times over
    (carry + block, quadratic); now the reader refuses the line as soon as
    it passes MAX_LINE, holding about a block, never the body."""
    outcome, peak = _peak(data)
    assert isinstance(outcome, SegmentError), outcome
    assert (outcome.code, outcome.line) == ("format", line)
    assert "64 KiB" in outcome.message
    assert peak < 12 << 20, peak         # the body is 40 MiB


@pytest.mark.parametrize("data, line", [
    (b"phone\n79995551111\n7999\x005551112\n", 3),                   # fast path
    (b'phone\n"79995551111"\n79995551112\n\x00\n', 4),              # csv path
    (b"phone\x00,email\n79995551111\n", 1),
])
def test_nul_bytes_are_a_format_error(data, line):
    counts, kept = upload(data)
    assert isinstance(counts, SegmentError), counts
    assert (counts.code, counts.line) == ("format", line)
    assert "NUL" in counts.message


def test_a_record_of_many_short_lines_is_bounded_too():
    cells = ",".join(['"7\n"'] * (MAX_LINE // 3))
    counts, _ = upload(("phone\n" + cells + "\n").encode())
    assert isinstance(counts, SegmentError) and counts.code == "format"


def test_a_normal_file_reads_in_bounded_memory():
    rows = "".join(f"User{i}@Example.com,+7 999 {i:07d}\n" for i in range(300_000))
    outcome, peak = _peak(("email,phone\n" + rows).encode())
    assert outcome.valid == 600_000


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(["phone,email", "email,name,phone"]),
       lines=st.lists(st.one_of(_lines.map("\n".join), st.text(alphabet="79,\"\r ", max_size=60)),
                      max_size=8),
       block=st.integers(1, 64))
def test_line_bound_and_nul_on_both_paths(monkeypatch, header, lines, block):
    """With a bound of 40 characters: the fast path and csv.reader alone
    answer the same, and a format error names a line that is too long or
    holds a NUL (lines as csv counts them: any of CR, LF, CRLF ends one)."""
    monkeypatch.setattr(parse_module, "MAX_LINE", 40)
    monkeypatch.setattr(parse_module, "BLOCK", block)
    text = header + "\n" + "\n".join(lines) + "\n"
    data = text.encode()
    fast = upload(data)
    _same(fast, _csv_only(monkeypatch, data))
    physical = io.StringIO(text, newline="").readlines()
    bad = [i for i, line in enumerate(physical, 1)
           if len(line.rstrip("\r\n")) > 40 or "\x00" in line]
    error = fast[0]
    if isinstance(error, SegmentError) and error.code == "format" and "line" in error.message:
        assert error.line in bad or "record" in error.message
    if not bad and isinstance(error, SegmentError):
        assert error.code != "format" or "record" in error.message or "CSV" in error.message
