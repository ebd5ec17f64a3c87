"""The AMQP change feed: RabbitMQ through txamqp (see docs/amqp.md).

``AmqpFeed`` consumes change messages from a fanout exchange into the
engine and publishes them with publisher confirms; ``parse_amqp_url`` reads
``amqp://user:pass@host:5672/vhost``.
"""
from pushengine.amqp.feed import DEFAULT_EXCHANGE, AmqpFeed
from pushengine.amqp.publisher import NotConnected, PublishFailed
from pushengine.amqp.url import AmqpUrl, parse_amqp_url

__all__ = ["AmqpFeed", "AmqpUrl", "DEFAULT_EXCHANGE", "NotConnected",
           "PublishFailed", "parse_amqp_url"]
