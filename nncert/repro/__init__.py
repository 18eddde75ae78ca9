"""Reproducers of nncert's findings that run without nncert (``standalone``)."""
