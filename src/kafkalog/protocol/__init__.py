"""Kafka's wire protocol, sans-IO: request frames in, response frames out, no logs or sockets."""
