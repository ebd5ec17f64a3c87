"""The twistd plugin ``twistd -n pushengine-cdc``: the relay from PostgreSQL's
WAL to the AMQP exchange; everything lives in pushengine.app.cdc."""
from twisted.application.service import ServiceMaker

pushengine_cdc = ServiceMaker(
    "pushengine-cdc",
    "pushengine.app.cdc",
    "Publish each committed row change of PostgreSQL's mapped tables to the AMQP exchange.",
    "pushengine-cdc",
)
