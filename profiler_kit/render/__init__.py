"""Renderers: Report -> str. They format; they never compute figures."""
