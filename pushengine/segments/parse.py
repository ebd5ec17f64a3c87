"""Reading a CRM contact file into the hashes of a segment (SPEC section 15).

The file is read as a stream — a binary file object, in chunks, decoded by
``io.TextIOWrapper`` and split by the ``csv`` module — so a file of 1 GiB is
never held whole. Entries go out in chunks of digests to a *sink*, which
answers how many of each chunk were new (the in-process store's set, or
Redis's ``SADD``): duplicates are counted where the set is, and the reader's
own memory stays bounded by one chunk.

Rules (the well-known ad platform's audience files):

- encoding: UTF-8 (with or without a BOM) or Windows-1251, found from the
  first 64 KiB; a byte the chosen encoding cannot read later is an
  ``encoding`` error at its line;
- the first line holds the headers, comma-separated; ``phone`` and/or
  ``email`` (case and surrounding spaces ignored) must be among them; other
  columns are ignored; a line split by ``;`` (or a tab) is refused with
  ``header_validation``, and so is a quoted header that is not ``phone`` or
  ``email``;
- a phone is digits with its country code once ``+``, spaces, dashes and
  brackets are removed, valid for ``phonenumbers`` (segments/phones.py);
  an email is trimmed and lower-cased and must look like ``a@b.c``;
- every non-empty cell of those columns is an entry; an entry is valid,
  invalid, or a duplicate of a valid one (a phone and an email of one
  contact are two entries); fewer valid unique entries than the minimum is
  ``too_few_unique``;
- what is kept is the SHA-256 of the normalized value (32 bytes), never the
  value; with ``hashed="sha256"`` or ``"md5"`` the cells already are hex
  digests, kept as they are.
"""
from __future__ import annotations

import codecs
import csv
import hashlib
import io
import re
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO, Callable

from pushengine.segments.phones import normalize_phone

SNIFF = 64 * 1024
CHUNK = 20_000          # digests per sink call
MAX_FIELD = 64 * 1024   # a cell longer than this is not a phone or an email
COLUMNS = ("phone", "email")
HASHES = {"sha256": 64, "md5": 32}
_EMAIL = re.compile(r"[^@\s\"',;<>]+@[^@\s\"',;<>]+\.[^@\s\"',;<>.]+")
_HEX = re.compile(r"[0-9a-f]+")


@dataclass
class Counts:
    rows: int = 0           # data lines read (the header not counted)
    valid: int = 0          # valid unique entries: what the segment holds
    invalid: int = 0
    duplicates: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class SegmentError(Exception):
    """An upload refused: ``code`` is header_validation, encoding,
    too_few_unique (or bad_request for what is not the file's fault)."""

    def __init__(self, code: str, message: str, line: int | None = None,
                 counts: Counts | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.counts = counts
        self.status = status

    def as_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.line is not None:
            error["line"] = self.line
        if self.counts is not None:
            error.update(self.counts.as_dict())
        return {"error": error}


def detect_encoding(head: bytes) -> str:
    """utf-8-sig (a BOM), utf-8 (the first bytes decode), else cp1251."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        return "utf-8"
    except UnicodeDecodeError:
        return "cp1251"


def sha256(value: str) -> bytes:
    """The digest a segment keeps for a normalized phone or email."""
    return hashlib.sha256(value.encode("utf-8")).digest()


def normalize_email(text: str) -> str | None:
    value = text.strip().lower()
    return value if len(value) <= 254 and _EMAIL.fullmatch(value) else None


def _header(line: str) -> tuple[int | None, int | None]:
    """The columns of phone and email in the header line; SegmentError
    (header_validation, line 1) when the line breaks a rule."""
    def refuse(message: str) -> SegmentError:
        return SegmentError("header_validation", message, line=1)
    text = line.rstrip("\r\n")
    if not text.strip():
        raise refuse("the first line must hold the headers (phone and/or email); it is empty")
    try:
        names = next(csv.reader([text], strict=True))
        raw = next(csv.reader([text], quoting=csv.QUOTE_NONE))
    except csv.Error as e:
        raise refuse(f"the header line is not valid CSV: {e}") from None
    found: dict[str, int] = {}
    for i, name in enumerate(names):
        key = name.strip().lower()
        quoted = i < len(raw) and raw[i].strip().startswith('"')
        if quoted and key not in COLUMNS:
            raise refuse(f"quoted header {name[:50]!r}: a header in quotes must be phone "
                         f"or email")
        if key in COLUMNS:
            if key in found:
                raise refuse(f"the header {key!r} is given twice")
            found[key] = i
    if not found:
        for delimiter, what in ((";", "';'"), ("\t", "a tab"), ("|", "'|'")):
            if delimiter in text:
                raise refuse(f"the headers are separated by {what}: the file must be "
                             f"comma-separated (phone,email)")
        raise refuse("no phone or email header: the first line must name a phone and/or "
                     "an email column")
    return found.get("phone"), found.get("email")


def _bad_line(stream: BinaryIO, encoding: str) -> tuple[int | None, int]:
    """The line (1-based, physical) and byte that ``encoding`` cannot
    read, found by reading the file again (only when it failed)."""
    try:
        stream.seek(0)
    except (OSError, ValueError):
        return None, 0
    decoder = codecs.getincrementaldecoder(encoding)()
    number = 0
    for number, raw in enumerate(stream, 1):
        try:
            decoder.decode(raw)
        except UnicodeDecodeError as e:
            return number, e.object[e.start]
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        return number, e.object[e.start]
    return None, 0


def read_segment(stream: BinaryIO, sink: Any, *,
                 hashed: str | None = None, minimum: int = 100,
                 progress: Callable[[int], None] | None = None,
                 chunk: int = CHUNK) -> Counts:
    """Read a contact file from a binary stream (positioned at its start);
    hand the digests to ``sink.add(chunk)`` in chunks; ``sink.total()``
    answers, at the end, how many distinct digests it holds.
    Raises SegmentError; on success returns the counts."""
    if hashed is not None and hashed not in HASHES:
        raise SegmentError("bad_request", f"hashed must be one of {', '.join(HASHES)}")
    buffered = stream if hasattr(stream, "peek") else io.BufferedReader(stream, SNIFF)
    encoding = detect_encoding(buffered.peek(SNIFF)[:SNIFF])
    text = io.TextIOWrapper(buffered, encoding=encoding, newline="")
    counts = Counts()
    line = 1
    try:
        first = text.readline(MAX_FIELD)
        if not first:
            raise SegmentError("header_validation", "the file is empty: the first line "
                               "must hold the headers (phone and/or email)", line=1)
        phone_col, email_col = _header(first)
        hex_len = HASHES.get(hashed or "")
        reader = csv.reader(text)
        pending: list[bytes] = []
        valid_total = 0
        for row in reader:
            counts.rows += 1
            for col, is_phone in ((phone_col, True), (email_col, False)):
                if col is None or col >= len(row):
                    continue
                cell = row[col]
                if not cell or cell.isspace():
                    continue
                if hex_len is not None:
                    value = cell.strip().lower()
                    if len(value) == hex_len and _HEX.fullmatch(value):
                        pending.append(bytes.fromhex(value))
                    else:
                        counts.invalid += 1
                    continue
                value = normalize_phone(cell) if is_phone else normalize_email(cell)
                if value is None:
                    counts.invalid += 1
                else:
                    pending.append(hashlib.sha256(value.encode()).digest())
            if len(pending) >= chunk:
                valid_total += len(pending)
                sink.add(pending)
                pending = []
                if progress is not None:
                    progress(counts.rows)
        line = reader.line_num + 1
        if pending:
            valid_total += len(pending)
            sink.add(pending)
        counts.valid = sink.total()
        counts.duplicates = valid_total - counts.valid
    except UnicodeDecodeError as e:
        text.detach()
        where, byte = _bad_line(buffered, encoding)
        raise SegmentError("encoding", f"the file is neither UTF-8 nor Windows-1251 text "
                           f"(read as {encoding.replace('-sig', '')}: byte 0x{byte:02x} "
                           f"cannot be read)", line=where) from None
    except csv.Error as e:
        text.detach()
        raise SegmentError("format", f"the file is not valid CSV: {e}",
                           line=counts.rows + 2) from None
    text.detach()
    if counts.valid < minimum:
        raise SegmentError("too_few_unique",
                           f"{counts.valid} valid unique entries, fewer than the minimum of "
                           f"{minimum} (invalid: {counts.invalid}, duplicates: "
                           f"{counts.duplicates})", line=counts.rows + 1, counts=counts)
    return counts
