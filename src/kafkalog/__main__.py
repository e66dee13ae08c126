"""``python -m kafkalog``: the same command as the ``kafkalog`` console script."""

from kafkalog.cli.main import main

main()
