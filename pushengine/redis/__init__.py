"""The Redis adapter: one connection class (``link``) and the Redis
backends of the session registry, presence, Bloom filters and segments."""
