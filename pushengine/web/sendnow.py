"""Send at once when nothing waits: one ``send`` instead of two ``epoll_ctl``.

Twisted's ``transport.write`` only buffers: it registers the socket for
writing (``epoll_ctl``), sends at the next reactor turn and unregisters it
once the buffer is empty (``epoll_ctl`` again). A push server writes one
small message to thousands of sockets per event; for each, those two system
calls and the reactor's turn through ``doWrite`` cost about as much as the
``send`` itself. ``send_now`` sends straight away when the transport's buffer
is empty (what asyncio's transports do) and leaves the rest, the buffered
case, and any error to Twisted's own write path.

It reads the buffers of ``twisted.internet.abstract.FileDescriptor``
(``dataBuffer``, ``_tempDataBuffer``, ``_writeDisconnected``): private
attributes, which is why Twisted's version range is pinned in setup.cfg. Any
other transport (TLS, a test's StringTransport) gets a plain ``write``.
"""
from __future__ import annotations

from twisted.internet.interfaces import ITransport
from twisted.internet.tcp import Connection


def send_now(transport: ITransport, data: bytes) -> None:
    """Write ``data`` to ``transport``, sending it now if nothing is queued."""
    if (not isinstance(transport, Connection) or transport.dataBuffer
            or transport._tempDataBuffer or not transport.connected
            or transport.disconnecting or transport._writeDisconnected):
        transport.write(data)
        return
    sent = transport.writeSomeData(data)
    if isinstance(sent, Exception) or sent < 0:
        transport.write(data)        # Twisted finds the error on its own path
    elif sent < len(data):
        transport.write(data[sent:])
