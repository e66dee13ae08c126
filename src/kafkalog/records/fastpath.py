"""Which record codec runs the per-record loops: the compiled ``_fastcodec`` or the reference.

Why: the compiled extension is optional (built by ``pip install .`` when a C compiler is
there), so every user of it asks here and falls back to the pure-Python reference, which stays
the specification. Refuses: reading the environment (this layer does no I/O);
``kafkalog/__init__.py`` applies ``KAFKALOG_PURE_PYTHON=1``.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def _load() -> ModuleType | None:
    try:
        return importlib.import_module("kafkalog.records._fastcodec")
    except ImportError:  # not built: the reference path serves
        return None


_COMPILED = _load()
_state = {"enabled": True}


def fast_codec() -> ModuleType | None:
    """The compiled extension, or None when the reference is in use."""
    return _COMPILED if _state["enabled"] else None


def use_fast_path(enabled: bool) -> bool:
    """Choose the compiled codec (when built) or the reference; returns whether the compiled one
    is now in use."""
    _state["enabled"] = enabled
    return fast_codec() is not None
