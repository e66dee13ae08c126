"""The ``kafkalog`` command line (issue 6): dump-log, topics, produce, consume, verify, recover,
retention and compact. Entry point: ``kafkalog.cli.main:main``."""
