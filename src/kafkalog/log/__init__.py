"""kafkalog.log: one partition (spec §4-§11): config, the Log, loader, validator, policies."""
