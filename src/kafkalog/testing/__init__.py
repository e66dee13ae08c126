"""Shipped test kit: hypothesis strategies (and, later, a model log) for kafkalog and its users.

Requires ``hypothesis`` (a dev dependency); nothing in the library imports this package.
"""
