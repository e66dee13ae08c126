"""kafkalog benchmarks: ``make bench`` (``python -m bench``). Each row sets our figure beside a
baseline measured in the same run and checks the ratio against the issue's target."""
