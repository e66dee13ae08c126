"""Build hook for the optional compiled fast path; everything else lives in pyproject.toml.

The extensions are optional: with no C compiler the build goes on and kafkalog runs on its
pure-Python reference codec (kafkalog.records.fastpath picks whichever is there), the cleaner on
its Python key map (kafkalog.cleaner.keymap), and the cleaner's key scan faults its pages in as
it walks (kafkalog.cleaner.page_in).
"""

import os

from setuptools import Extension, setup

# CI builds with warnings as errors: a warning there fails the build, and KAFKALOG_REQUIRE_FAST
# then fails the suite. Locally a newer compiler's new warning must not cost the fast path.
WERROR = ["-Werror"] if os.environ.get("CI", "").lower() in ("1", "true", "yes") else []
FAST = ["-O3", "-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"]
FAST += WERROR

setup(
    ext_modules=[
        Extension(
            "kafkalog.records._fastcodec",
            [
                "src/kafkalog/records/_fastcodec.c",
                "src/kafkalog/records/_record_objects.c",
                "src/kafkalog/records/_record_encode.c",
                "src/kafkalog/records/_batch_search.c",
                "src/kafkalog/records/_producer_batch.c",
            ],
            depends=[
                "src/kafkalog/records/_codec_state.h",
                "src/kafkalog/records/_v2_format.h",
                "src/kafkalog/records/_record_objects.h",
                "src/kafkalog/records/_crc32c.h",
            ],
            # hidden symbols: only PyInit__fastcodec is exported
            extra_compile_args=FAST,
            optional=True,
        ),
        Extension(
            "kafkalog.cleaner._keymap",
            ["src/kafkalog/cleaner/_keymap.c", "src/kafkalog/cleaner/_keymap_runs.c"],
            # the record parsing helpers are _v2_format.h's, header-only
            include_dirs=["src/kafkalog/records"],
            depends=["src/kafkalog/cleaner/_keymap.h", "src/kafkalog/records/_v2_format.h"],
            # hidden symbols: calls between the two files are direct (no PLT), so the compiler
            # may inline them; only PyInit__keymap is exported
            extra_compile_args=FAST,
            optional=True,
        ),
        Extension(
            "kafkalog.cleaner._pagein",
            ["src/kafkalog/cleaner/_pagein.c"],
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
