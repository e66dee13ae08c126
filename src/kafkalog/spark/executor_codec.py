"""The warning an executor gives when it runs the pure-Python record codec by accident.

Why: on a cluster, kafkalog shipped the wrong way (``--py-files`` zips it, and a compiled
extension cannot be imported from a zip) still works, several times slower, and nobody sees
why: the import-time RuntimeWarning is lost in the Python workers. So the first read or write
task of each executor process logs, once, on the ``kafkalog.spark`` logger (the executor's
stderr), which host runs the reference codec, why, and what to do. Refuses: warning when the
reference was chosen (``KAFKALOG_PURE_PYTHON=1``) or when the compiled codec is there.
"""

from __future__ import annotations

import logging
import os
import socket

import kafkalog
from kafkalog.records.codec import compiled_codec, compiled_codec_error

logger = logging.getLogger("kafkalog.spark")
_checked: list[bool] = []


def check_executor_codec() -> bool:
    """Log the warning once per process if the compiled codec did not load; returns whether
    this call logged it."""
    if _checked:
        return False
    _checked.append(True)
    if compiled_codec() is not None or os.environ.get("KAFKALOG_PURE_PYTHON", "") not in ("", "0"):
        return False
    where = kafkalog.__file__ or "?"
    zipped = ".zip" in where or ".egg" in where
    logger.warning(
        "kafkalog on executor %s (pid %d) runs the pure-Python record codec, several times "
        "slower: the compiled extension did not load (%s)%s. Install the kafkalog wheel into "
        "the executors' Python, or ship a packed environment with spark.archives "
        "(README: Spark on a cluster).",
        socket.gethostname(),
        os.getpid(),
        compiled_codec_error() or "not built",
        f"; kafkalog was imported from {where}, and a compiled extension cannot be imported "
        "from a zip (--py-files)"
        if zipped
        else "",
    )
    return True
