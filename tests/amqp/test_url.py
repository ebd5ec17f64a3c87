"""AMQP URL parsing."""
import pytest

from pushengine.amqp.url import AmqpUrl, parse_amqp_url


@pytest.mark.parametrize("url, expected", [
    ("amqp://user:pass@host:5673/vhost", AmqpUrl("host", 5673, "user", "pass", "vhost")),
    ("amqp://user:pass@host/", AmqpUrl("host", 5672, "user", "pass", "/")),
    ("amqp://user:pass@host", AmqpUrl("host", 5672, "user", "pass", "/")),
    ("amqp://host/%2F", AmqpUrl("host", 5672, "guest", "guest", "/")),
    ("amqp://host/%2Fprod", AmqpUrl("host", 5672, "guest", "guest", "/prod")),
    ("amqp://a%40b:p%3Aw%2Fd@host/v%20h", AmqpUrl("host", 5672, "a@b", "p:w/d", "v h")),
    ("amqp://u:@host", AmqpUrl("host", 5672, "u", "", "/")),
    ("amqp://[::1]:5672/", AmqpUrl("::1", 5672, "guest", "guest", "/")),
    ("amqp://", AmqpUrl("localhost", 5672, "guest", "guest", "/")),
])
def test_parse(url, expected):
    assert parse_amqp_url(url) == expected


@pytest.mark.parametrize("url, reason", [
    ("http://host/", "not an amqp:// URL"),
    ("amqps://host/", "TLS"),
    ("amqp://host:notaport/", "bad port"),
    ("amqp://host/a/b", "%2F"),
])
def test_parse_refuses(url, reason):
    with pytest.raises(ValueError, match=reason):
        parse_amqp_url(url)


def test_str_hides_the_password():
    url = parse_amqp_url("amqp://bob:s3cret@host:5672/prod%2Feu")
    assert "s3cret" not in str(url) and "s3cret" not in repr(url)
    assert str(url) == "amqp://bob@host:5672/prod%2Feu"
    assert parse_amqp_url(str(url)).vhost == "prod/eu"
    assert str(parse_amqp_url("amqp://h/")) == "amqp://guest@h:5672/"
