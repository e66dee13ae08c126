"""The ``kafkalog`` command line: dump-log, topics, produce, consume, verify, recover,
retention and compact. Entry point: ``kafkalog.cli.main:main``."""
