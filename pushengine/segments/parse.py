"""Reading a CRM contact file into the hashes of a segment (SPEC section 15).

The file is read as a stream — a binary file object, decoded by
``io.TextIOWrapper`` a block of about a MiB at a time — so a file of 1 GiB is
never held whole. A block without quotes, NUL bytes or bare carriage returns
(nearly every block of a real contact file) is split with ``str.split`` and
each column normalized and hashed in one comprehension (``_Batches``): the
``csv`` module's rows exactly, without a Python loop step per row; from the
first block that has any of those on, the ``csv`` module reads the rest. Entries go out in chunks of digests to a *sink*, which
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
import itertools
import re
from dataclasses import asdict, dataclass
from typing import IO, Any, BinaryIO, Callable, Iterator, Protocol, cast

from pushengine.segments.phones import normalize_phone

SNIFF = 64 * 1024
CHUNK = 20_000          # digests per sink call
MAX_FIELD = 64 * 1024   # a cell longer than this is not a phone or an email
MAX_LINE = 64 * 1024    # characters of a line (and of a record) before it is a format error
COLUMNS = ("phone", "email")
HASHES = {"sha256": 64, "md5": 32}
_EMAIL = re.compile(r"[^@\s\"',;<>]+@[^@\s\"',;<>]+\.[^@\s\"',;<>.]+")
_HEX = re.compile(r"[0-9a-f]+")


class DigestSink(Protocol):
    """Where the reader hands the digests (an upload of a segment store)."""

    def add(self, chunk: list[bytes]) -> None:
        """Take a chunk of digests (called from the reader's thread)."""

    def total(self) -> int:
        """How many distinct digests it holds, once every chunk is in."""


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
    read, found by reading the file again in blocks (only when it failed;
    a file without line breaks is never taken as one line)."""
    try:
        stream.seek(0)
    except (OSError, ValueError):
        return None, 0
    decoder = codecs.getincrementaldecoder(encoding)()
    lines = 1
    while True:
        raw = stream.read(1 << 16)
        try:
            decoder.decode(raw, final=not raw)
        except UnicodeDecodeError as e:
            return lines + e.object[:e.start].count(b"\n"), e.object[e.start]
        if not raw:
            return None, 0
        lines += raw.count(b"\n")


BLOCK = 1 << 20          # characters decoded and split at once by the fast path
_CSV_FIELD_LIMIT = csv.field_size_limit()
_sha256 = hashlib.sha256


class _Batches:
    """The fast path of the reader: the text is decoded a block (about a
    MiB) at a time, split into lines and cells with ``str.split``, and each
    column is normalized and hashed in one comprehension. It gives the
    ``csv`` module's rows exactly, for blocks without what makes CSV differ
    from a plain split: a quote, a NUL byte, a carriage return not followed
    by a line feed, or a line beyond the csv field limit. From the first
    such block on, ``rest()`` hands the remaining lines to ``csv.reader``."""

    def __init__(self, text: IO[str], phone_col: int | None, email_col: int | None,
                 hex_len: int | None, counts: Counts, sink: DigestSink, chunk: int,
                 progress: Callable[[int], None] | None) -> None:
        self.text = text
        self.phone_col, self.email_col, self.hex_len = phone_col, email_col, hex_len
        self.counts, self.sink, self.chunk, self.progress = counts, sink, chunk, progress
        self.pending: list[bytes] = []
        self.valid_total = 0
        self.left = ""          # text not handled yet (a partial line, or the rest)
        self.done = False

    def run(self) -> None:
        read, carry = self.text.read, ""
        while True:
            block = read(BLOCK)
            if not block:
                self.left, self.done = carry, True
                return
            block = carry + block              # carry is at most MAX_LINE: no quadratic join
            cut = block.rfind("\n") + 1
            whole, carry = block[:cut], block[cut:]
            if len(carry) > MAX_LINE:          # a line too long: the csv path says where
                self.left = block
                return
            if not whole:                      # no whole line yet
                continue
            if '"' in whole or "\x00" in whole or not self._plain_crs(whole):
                self.left = block
                return
            if "\r" in whole:
                whole = whole.replace("\r\n", "\n")
            lines = whole.split("\n")
            lines.pop()                        # after the last line feed: nothing
            if max(map(len, lines)) > MAX_LINE:
                self.left = block
                return
            self._lines(lines)

    @staticmethod
    def _plain_crs(text: str) -> bool:
        """Every carriage return ends a line with a line feed after it."""
        return text.count("\r") == text.count("\r\n")

    def _lines(self, lines: list[str]) -> None:
        counts = self.counts
        counts.rows += len(lines)
        rows = [line.split(",") for line in lines]
        pending = self.pending
        for col, normalize in ((self.phone_col, normalize_phone),
                               (self.email_col, normalize_email)):
            if col is None:
                continue
            cells = [r[col] for r in rows if len(r) > col]
            cells = [c for c in cells if c and not c.isspace()]
            if self.hex_len is not None:
                hex_len, match = self.hex_len, _HEX.fullmatch
                values = [c.strip().lower() for c in cells]
                good = [bytes.fromhex(v) for v in values
                        if len(v) == hex_len and match(v) is not None]
            else:
                values = [v for v in map(normalize, cells) if v is not None]
                good = [_sha256(v.encode()).digest() for v in values]
            counts.invalid += len(cells) - len(good)
            pending += good
        if len(pending) >= self.chunk:
            self.valid_total += len(pending)
            chunk = self.chunk
            for i in range(0, len(pending), chunk):
                self.sink.add(pending[i:i + chunk])
            self.pending = []
            if self.progress is not None:
                self.progress(counts.rows)

    def rest(self) -> "_Lines":
        """The lines the fast path left, then the rest of the file, as lines
        for ``csv.reader``, each checked (length, NUL)."""
        left: Iterator[str] = io.StringIO(self.left, newline="")
        if not self.done:
            more = iter(lambda: self.text.readline(MAX_LINE + 1), "")
            left = itertools.chain(left, more)
        return _Lines(left, self.counts.rows + 2)


def _format(message: str, line: int) -> SegmentError:
    return SegmentError("format", message, line=line)


def _record_too_long(line: int) -> SegmentError:
    return _format(f"a record (lines joined inside quotes) longer than {MAX_LINE // 1024} KiB",
                   line)


class _Lines:
    """Physical lines (ended by LF, CR or CRLF, as ``csv`` reads them) from
    pieces of at most about MAX_LINE characters, refusing, as ``format``
    errors with their line, a line longer than MAX_LINE, a NUL character,
    and a record (lines csv joins inside quotes) longer than MAX_LINE. What
    it holds is one line at most, whatever the file."""

    def __init__(self, pieces: Iterator[str], first_line: int) -> None:
        self.pieces = pieces
        self.line = first_line - 1      # the last line handed out
        self.record = 0                 # characters of the record being read
        self._gen = self._lines()

    def __iter__(self) -> Iterator[str]:
        return self._gen

    def _checked(self, text: str) -> str:
        self.line += 1
        body = len(text) - (2 if text.endswith("\r\n") else 1 if text[-1:] in "\r\n" else 0)
        if body > MAX_LINE:
            raise _format(f"a line longer than {MAX_LINE // 1024} KiB "
                          f"({MAX_LINE} characters)", self.line)
        if "\x00" in text:
            raise _format("a NUL character: a contact file is text", self.line)
        self.record += len(text)
        if self.record > MAX_LINE + 2:
            raise _record_too_long(self.line)
        return text

    def _lines(self) -> Iterator[str]:
        buf = ""
        held = ""               # a line ended by CR: its LF may start the next piece
        limit = MAX_LINE + 1
        for piece in self.pieces:
            n = len(piece)
            if n <= limit and not held and not buf and piece[-1] == "\n" \
                    and "\x00" not in piece:
                # the common case: a whole, short, clean line
                self.line += 1
                self.record += n
                if self.record > MAX_LINE + 2:
                    raise _record_too_long(self.line)
                yield piece
                continue
            if held:
                if piece.startswith("\n"):
                    held, piece = held + "\n", piece[1:]
                yield self._checked(held)
                held = ""
                if not piece:
                    continue
            buf += piece
            if buf.endswith("\n"):
                line, buf = buf, ""
                yield self._checked(line)
            elif buf.endswith("\r"):
                held, buf = buf, ""
            elif len(buf) > MAX_LINE:
                self._checked(buf)      # raises: too long
        if held:
            yield self._checked(held)
        if buf:
            yield self._checked(buf)


def read_segment(stream: BinaryIO, sink: DigestSink, *,
                 hashed: str | None = None, minimum: int = 100,
                 progress: Callable[[int], None] | None = None,
                 chunk: int = CHUNK) -> Counts:
    """Read a contact file from a binary stream (positioned at its start);
    hand the digests to ``sink.add(chunk)`` in chunks; ``sink.total()``
    answers, at the end, how many distinct digests it holds.
    Raises SegmentError; on success returns the counts."""
    if hashed is not None and hashed not in HASHES:
        raise SegmentError("bad_request", f"hashed must be one of {', '.join(HASHES)}")
    # a stream that can peek, or one made so (BufferedReader takes any
    # readable binary stream, whatever its declared raw type)
    buffered = cast(io.BufferedReader, stream) if hasattr(stream, "peek") \
        else io.BufferedReader(cast(io.RawIOBase, stream), SNIFF)
    encoding = detect_encoding(buffered.peek(SNIFF)[:SNIFF])
    text = io.TextIOWrapper(buffered, encoding=encoding, newline="")
    counts = Counts()
    try:
        first = text.readline(MAX_LINE + 1)
        if not first:
            raise SegmentError("header_validation", "the file is empty: the first line "
                               "must hold the headers (phone and/or email)", line=1)
        if len(first.rstrip("\r\n")) > MAX_LINE:
            raise _format(f"a line longer than {MAX_LINE // 1024} KiB ({MAX_LINE} "
                          f"characters)", 1)
        if "\x00" in first:
            raise _format("a NUL character: a contact file is text", 1)
        phone_col, email_col = _header(first)
        hex_len = HASHES.get(hashed or "")
        batches = _Batches(text, phone_col, email_col, hex_len, counts, sink, chunk,
                           progress)
        batches.run()
        valid_total, pending = batches.valid_total, batches.pending
        lines = batches.rest()
        reader = csv.reader(lines)
        for row in reader:
            lines.record = 0            # csv made a row of the lines so far
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
                normal = normalize_phone(cell) if is_phone else normalize_email(cell)
                if normal is None:
                    counts.invalid += 1
                else:
                    pending.append(hashlib.sha256(normal.encode()).digest())
            if len(pending) >= chunk:
                valid_total += len(pending)
                sink.add(pending)
                pending = []
                if progress is not None:
                    progress(counts.rows)
        if pending:
            valid_total += len(pending)
            sink.add(pending)
        counts.valid = sink.total()
        counts.duplicates = valid_total - counts.valid
    except UnicodeDecodeError:
        text.detach()
        where, byte = _bad_line(buffered, encoding)
        raise SegmentError("encoding", f"the file is neither UTF-8 nor Windows-1251 text "
                           f"(read as {encoding.replace('-sig', '')}: byte 0x{byte:02x} "
                           f"cannot be read)", line=where) from None
    except SegmentError:
        text.detach()
        raise
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
