"""Command-line tools and the demo producer: ``pushengine-publish``,
``pushengine-segment`` and ``--demo``'s fake streams."""
