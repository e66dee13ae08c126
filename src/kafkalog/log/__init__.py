"""kafkalog.log: one partition (Kafka's UnifiedLog, LocalLog, LogSegment): config, the Log, loader,
validator, policies."""
