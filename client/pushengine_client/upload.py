"""A request body sent as a stream: a segment file of up to 1 GiB is read in
blocks while it goes out, never held whole, and each block sent is reported
to a progress callback. Both flavours send it the same way: they iterate
``Upload.chunks()``.
"""
from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, Union

from pushengine_client.errors import BadInput

BLOCK = 256 * 1024
Progress = Callable[[int, Union[int, None]], None]
"""``progress(sent, total)``: bytes handed to the connection so far, and the
whole size (None when it is not known); called with 0 before the first block
(and again when a retry sends the body from its start)."""
Source = Union[bytes, BinaryIO, Iterable[bytes]]


class Upload:
    """A body read from a binary file (from its current position to its
    end) or from an iterable of bytes.

    ``size``: the number of bytes the body holds. A file's is found by
    itself; an iterable without a size is sent chunked (a node's fast HTTP
    front holds a chunked upload to ``--max-body``: give the size). A body
    that yields more or fewer bytes than its size is refused with BadInput
    (the node would wait for the missing bytes, or read the extra ones as a
    request). A file that can seek, or a sequence of blocks, can be sent
    again from its start when a call is retried; a generator cannot.
    """

    def __init__(self, source: Source, *, size: int | None = None,
                 progress: Progress | None = None, block: int = BLOCK) -> None:
        if isinstance(source, (bytes, bytearray, memoryview)):
            source = io.BytesIO(bytes(source))
        if block < 1:
            raise ValueError("block must be at least 1 byte")
        self.block = block
        self.progress = progress
        self.sent = 0
        self._file: BinaryIO | None = None
        self._start = 0
        self._blocks: Iterable[bytes] | None = None
        self._iterator: Iterator[bytes] | None = None
        if hasattr(source, "read"):
            f: BinaryIO = source    # type: ignore[assignment]
            self._file = f
            if size is None:
                size = _remaining(f)
            self._start = f.tell() if _seekable(f) else -1
        elif isinstance(source, Iterable):
            self._blocks = source
        else:
            raise TypeError("an upload is bytes, a binary file or an iterable of bytes")
        if size is not None and size < 0:
            raise ValueError("size must be 0 or more")
        self.size = size
        self._used = False

    def rewind(self) -> bool:
        """Make the next ``chunks()`` start from the beginning again; False
        when the source cannot be read again (a generator, a pipe)."""
        if not self._used:
            return True
        if self._file is not None:
            if self._start < 0:
                return False
            self._file.seek(self._start)
        elif self._blocks is None or iter(self._blocks) is self._blocks:
            return False
        self.sent = 0
        self._used = False
        return True

    def chunks(self) -> Iterator[bytes]:
        """The body's blocks, each reported to ``progress`` once taken."""
        self._used = True
        self.sent = 0
        self._report()
        for data in self._read():
            if not data:
                continue
            if self.size is not None and self.sent + len(data) > self.size:
                raise BadInput(f"the upload holds more than the {self.size} bytes given "
                               f"as its size")
            self.sent += len(data)
            yield data
            self._report()
        if self.size is not None and self.sent != self.size:
            raise BadInput(f"the upload held {self.sent} bytes, not the {self.size} given "
                           f"as its size")

    def _read(self) -> Iterator[bytes]:
        if self._file is not None:
            while True:
                data = self._file.read(self.block)
                if not data:
                    return
                yield bytes(data)
        else:
            assert self._blocks is not None
            for data in self._blocks:
                if not isinstance(data, (bytes, bytearray, memoryview)):
                    raise BadInput(f"an upload's blocks are bytes, not {type(data).__name__}")
                yield bytes(data)

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.sent, self.size)


def _seekable(f: BinaryIO) -> bool:
    try:
        return f.seekable()
    except (AttributeError, OSError, ValueError):
        return False


def _remaining(f: BinaryIO) -> int | None:
    """Bytes from the file's position to its end, when that can be known."""
    if not _seekable(f):
        return None
    here = f.tell()
    try:
        end = os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        end = f.seek(0, io.SEEK_END)
        f.seek(here)
    return max(end - here, 0)


def open_upload(source: Source | str | os.PathLike[str], *, size: int | None = None,
                progress: Progress | None = None, block: int = BLOCK
                ) -> tuple[Upload, Callable[[], None]]:
    """An Upload of a path (opened here: the second value closes it), a
    file, bytes or an iterable of bytes."""
    if isinstance(source, (str, os.PathLike)):
        f = open(source, "rb")
        try:
            return Upload(f, size=size, progress=progress, block=block), f.close
        except BaseException:
            f.close()
            raise
    return Upload(source, size=size, progress=progress, block=block), lambda: None
