"""The group and transaction coordinators' state: classic groups and their rules, and the
records of ``__consumer_offsets`` and ``__transaction_state`` in Kafka's formats."""
