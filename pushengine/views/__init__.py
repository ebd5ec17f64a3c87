"""Views: live, filtered, ordered, limited queries over the object stream."""
