"""``kafkalog serve``: Kafka's wire protocol over the LogManager, so Kafka's own clients and
tools produce to and consume from kafkalog's log directories (see README, "Serve")."""

from kafkalog.server.serve import KafkaServer, serve, server_config

__all__ = ["KafkaServer", "serve", "server_config"]
