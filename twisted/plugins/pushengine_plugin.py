"""The twistd plugin: ``twistd -n pushengine``; everything lives in pushengine.app.tap."""
from twisted.application.service import ServiceMaker

pushengine = ServiceMaker(
    "pushengine",
    "pushengine.app.tap",
    "A realtime push engine: live views over a change feed, long-polled over JSON-RPC.",
    "pushengine",
)
