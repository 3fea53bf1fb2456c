"""Presentation built from the plain data services return: Plotly figures as dicts, diff HTML.

Views and template tags use it; services never import it."""
