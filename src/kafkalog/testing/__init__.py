"""Shipped test kit: hypothesis strategies (and, later, a model log) for kafkalog and its users.

Requires ``hypothesis``: install ``kafkalog[testing]``. Nothing in the library imports this package.
"""
