"""Offline side of infonce-search: data → train → report → index → bundle."""

__version__ = "0.1.0"
