"""Build hook for the optional compiled fast path; everything else lives in pyproject.toml.

The extensions are optional: with no C compiler the build goes on and kafkalog runs on its
pure-Python reference codec (kafkalog.records.columnar picks whichever is there), and the
cleaner's key scan faults its pages in as it walks (kafkalog.storage.page_in).
"""

import os

from setuptools import Extension, setup

# CI builds with warnings as errors: a warning there fails the build, and KAFKALOG_REQUIRE_FAST
# then fails the suite. Locally a newer compiler's new warning must not cost the fast path.
WERROR = ["-Werror"] if os.environ.get("CI", "").lower() in ("1", "true", "yes") else []

setup(
    ext_modules=[
        Extension(
            "kafkalog.records._fastcodec",
            [
                "src/kafkalog/records/_fastcodec.c",
                "src/kafkalog/records/_compact.c",
                "src/kafkalog/records/_compact_runs.c",
            ],
            depends=["src/kafkalog/records/_fastcodec.h", "src/kafkalog/records/_compact.h"],
            # hidden symbols: calls between the files' functions are direct (no PLT), so the
            # compiler may inline them; only PyInit__fastcodec is exported
            extra_compile_args=[
                "-O3",
                "-std=c11",
                "-fvisibility=hidden",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                *WERROR,
            ],
            optional=True,
        ),
        Extension(
            "kafkalog.storage._pagein",
            ["src/kafkalog/storage/_pagein.c"],
            extra_compile_args=[
                "-O2",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                *WERROR,
            ],
            optional=True,
        ),
    ]
)
