"""Indexed full-text search of steps (issue 27): the query language (`query`), each
database's SQL (`backends`) and `search_steps` (`service`)."""
