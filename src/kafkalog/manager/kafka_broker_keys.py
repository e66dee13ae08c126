"""Apache Kafka 4.3.1's broker keys, by whether a broker takes them at run time (Kafka's
DynamicBrokerConfig and DynamicConfig.Broker).

Why: ``kafka-configs --entity-type brokers --alter`` and AdminClient's ``alterConfigs`` on a
BROKER resource may set only the keys Kafka reconfigures at run time, some for one broker only
(SSL and SASL per listener, listeners); a broker key that is read at start-up alone
(``broker.id``, ``log.dirs`` ...) is refused by name, and a key Kafka does not know is kept.
The answers must be Kafka's, so the rules are its data: each run-time key with its
``ConfigDef`` type, whether it is per-broker, and its validator (a range, or the values it
takes), as ``DynamicBrokerConfig.dynamicConfigUpdateModes()`` and
``DynamicConfig.Broker.configKeys()`` give them, and the names of
``DynamicConfig.Broker.nonDynamicProps()``. Refuses: any behaviour; the rules that use this
data are ``dynamic_broker_config``'s.
"""

from __future__ import annotations

# name -> (Kafka's ConfigDef.Type, per-broker, validator): the validator is None, (low, high)
# for a range (None: unbounded), (low, high, also) for a range plus one more value (the gzip
# level's -1), or the strings the value (each item of a list) must be one of
DYNAMIC_BROKER_KEYS: dict[str, tuple[str, bool, tuple[object, ...] | None]] = {
    "background.threads": ("INT", False, (1, None)),
    "compression.gzip.level": ("INT", False, (1, 9, -1)),
    "compression.lz4.level": ("INT", False, (1, 17)),
    "compression.type": (
        "STRING",
        False,
        (
            "uncompressed",
            "zstd",
            "lz4",
            "snappy",
            "gzip",
            "producer",
        ),
    ),
    "compression.zstd.level": ("INT", False, (-131072, 22)),
    "config.providers": ("LIST", False, None),
    "cordoned.log.dirs": ("LIST", True, None),
    "follower.fetch.last.tiered.offset.enable": ("BOOLEAN", False, None),
    "follower.replication.throttled.rate": ("LONG", False, (0, None)),
    "group.consumer.assignment.interval.ms": ("INT", False, (0, None)),
    "group.coordinator.cached.buffer.max.bytes": ("INT", False, (524288, None)),
    "group.share.assignment.interval.ms": ("INT", False, (0, None)),
    "group.streams.assignment.interval.ms": ("INT", False, (0, None)),
    "leader.replication.throttled.rate": ("LONG", False, (0, None)),
    "listener.security.protocol.map": ("STRING", True, None),
    "listeners": ("LIST", True, None),
    "log.cleaner.backoff.ms": ("LONG", False, (0, None)),
    "log.cleaner.dedupe.buffer.size": ("LONG", False, None),
    "log.cleaner.delete.retention.ms": ("LONG", False, (0, None)),
    "log.cleaner.io.buffer.load.factor": ("DOUBLE", False, None),
    "log.cleaner.io.buffer.size": ("INT", False, (0, None)),
    "log.cleaner.io.max.bytes.per.second": ("DOUBLE", False, None),
    "log.cleaner.max.compaction.lag.ms": ("LONG", False, (1, None)),
    "log.cleaner.min.cleanable.ratio": ("DOUBLE", False, (0, 1)),
    "log.cleaner.min.compaction.lag.ms": ("LONG", False, (0, None)),
    "log.cleaner.threads": ("INT", False, (0, None)),
    "log.cleanup.policy": (
        "LIST",
        False,
        (
            "compact",
            "delete",
        ),
    ),
    "log.flush.interval.messages": ("LONG", False, (1, None)),
    "log.flush.interval.ms": ("LONG", False, None),
    "log.index.interval.bytes": ("INT", False, (0, None)),
    "log.index.size.max.bytes": ("INT", False, (4, None)),
    "log.local.retention.bytes": ("LONG", False, (-2, None)),
    "log.local.retention.ms": ("LONG", False, (-2, None)),
    "log.message.timestamp.after.max.ms": ("LONG", False, (0, None)),
    "log.message.timestamp.before.max.ms": ("LONG", False, (0, None)),
    "log.message.timestamp.type": (
        "STRING",
        False,
        (
            "CreateTime",
            "LogAppendTime",
        ),
    ),
    "log.preallocate": ("BOOLEAN", False, None),
    "log.retention.bytes": ("LONG", False, None),
    "log.retention.ms": ("LONG", False, None),
    "log.roll.jitter.ms": ("LONG", False, None),
    "log.roll.ms": ("LONG", False, None),
    "log.segment.bytes": ("INT", False, (1048576, None)),
    "log.segment.delete.delay.ms": ("LONG", False, (0, None)),
    "max.connection.creation.rate": ("INT", False, (0, None)),
    "max.connections": ("INT", False, (0, None)),
    "max.connections.per.ip": ("INT", False, (0, None)),
    "max.connections.per.ip.overrides": ("STRING", False, None),
    "message.max.bytes": ("INT", False, (0, None)),
    "metric.reporters": ("LIST", False, None),
    "min.insync.replicas": ("INT", False, (1, None)),
    "num.io.threads": ("INT", False, (1, None)),
    "num.network.threads": ("INT", False, (1, None)),
    "num.recovery.threads.per.data.dir": ("INT", False, (1, None)),
    "num.replica.fetchers": ("INT", False, (1, None)),
    "principal.builder.class": ("CLASS", True, None),
    "producer.id.expiration.ms": ("INT", False, (1, None)),
    "remote.fetch.max.wait.ms": ("INT", False, (1, None)),
    "remote.list.offsets.request.timeout.ms": ("LONG", False, (1, None)),
    "remote.log.index.file.cache.total.size.bytes": ("LONG", False, (1, None)),
    "remote.log.manager.copier.thread.pool.size": ("INT", False, (1, None)),
    "remote.log.manager.copy.max.bytes.per.second": ("LONG", False, (1, None)),
    "remote.log.manager.expiration.thread.pool.size": ("INT", False, (1, None)),
    "remote.log.manager.fetch.max.bytes.per.second": ("LONG", False, (1, None)),
    "remote.log.manager.follower.thread.pool.size": ("INT", False, (1, None)),
    "remote.log.reader.threads": ("INT", False, (1, None)),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("LONG", False, (0, None)),
    "sasl.enabled.mechanisms": ("LIST", True, None),
    "sasl.jaas.config": ("PASSWORD", True, None),
    "sasl.kerberos.kinit.cmd": ("STRING", True, None),
    "sasl.kerberos.min.time.before.relogin": ("LONG", True, None),
    "sasl.kerberos.principal.to.local.rules": ("LIST", True, None),
    "sasl.kerberos.service.name": ("STRING", True, None),
    "sasl.kerberos.ticket.renew.jitter": ("DOUBLE", True, None),
    "sasl.kerberos.ticket.renew.window.factor": ("DOUBLE", True, None),
    "sasl.login.refresh.buffer.seconds": ("SHORT", True, None),
    "sasl.login.refresh.min.period.seconds": ("SHORT", True, None),
    "sasl.login.refresh.window.factor": ("DOUBLE", True, None),
    "sasl.login.refresh.window.jitter": ("DOUBLE", True, None),
    "sasl.mechanism.inter.broker.protocol": ("STRING", True, None),
    "share.coordinator.cached.buffer.max.bytes": ("INT", False, (524288, None)),
    "ssl.cipher.suites": ("LIST", True, None),
    "ssl.client.auth": (
        "STRING",
        True,
        (
            "required",
            "requested",
            "none",
        ),
    ),
    "ssl.enabled.protocols": ("LIST", True, None),
    "ssl.endpoint.identification.algorithm": ("STRING", True, None),
    "ssl.engine.factory.class": ("CLASS", True, None),
    "ssl.key.password": ("PASSWORD", True, None),
    "ssl.keymanager.algorithm": ("STRING", True, None),
    "ssl.keystore.certificate.chain": ("PASSWORD", True, None),
    "ssl.keystore.key": ("PASSWORD", True, None),
    "ssl.keystore.location": ("STRING", True, None),
    "ssl.keystore.password": ("PASSWORD", True, None),
    "ssl.keystore.type": ("STRING", True, None),
    "ssl.protocol": ("STRING", True, None),
    "ssl.provider": ("STRING", True, None),
    "ssl.secure.random.implementation": ("STRING", True, None),
    "ssl.trustmanager.algorithm": ("STRING", True, None),
    "ssl.truststore.certificates": ("PASSWORD", True, None),
    "ssl.truststore.location": ("STRING", True, None),
    "ssl.truststore.password": ("PASSWORD", True, None),
    "ssl.truststore.type": ("STRING", True, None),
    "transaction.partition.verification.enable": ("BOOLEAN", False, None),
    "unclean.leader.election.enable": ("BOOLEAN", False, None),
}

# each run-time key's Kafka default, as DescribeConfigs writes it (None: no default);
# APPEND and SUBTRACT on a list key that is not set start from it
DYNAMIC_BROKER_DEFAULTS: dict[str, str | None] = {
    "background.threads": "10",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "config.providers": "",
    "cordoned.log.dirs": "",
    "follower.fetch.last.tiered.offset.enable": "false",
    "follower.replication.throttled.rate": "9223372036854775807",
    "group.consumer.assignment.interval.ms": "1000",
    "group.coordinator.cached.buffer.max.bytes": "1048588",
    "group.share.assignment.interval.ms": "1000",
    "group.streams.assignment.interval.ms": "1000",
    "leader.replication.throttled.rate": "9223372036854775807",
    "listener.security.protocol.map": (
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
    ),
    "listeners": "PLAINTEXT://:9092",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.io.buffer.load.factor": "0.9",
    "log.cleaner.io.buffer.size": "524288",
    "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
    "log.cleaner.max.compaction.lag.ms": "9223372036854775807",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.threads": "1",
    "log.cleanup.policy": "delete",
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": None,
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.local.retention.bytes": "-2",
    "log.local.retention.ms": "-2",
    "log.message.timestamp.after.max.ms": "3600000",
    "log.message.timestamp.before.max.ms": "9223372036854775807",
    "log.message.timestamp.type": "CreateTime",
    "log.preallocate": "false",
    "log.retention.bytes": "-1",
    "log.retention.ms": None,
    "log.roll.jitter.ms": None,
    "log.roll.ms": None,
    "log.segment.bytes": "1073741824",
    "log.segment.delete.delay.ms": "60000",
    "max.connection.creation.rate": "2147483647",
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "message.max.bytes": "1048588",
    "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter",
    "min.insync.replicas": "1",
    "num.io.threads": "8",
    "num.network.threads": "3",
    "num.recovery.threads.per.data.dir": "2",
    "num.replica.fetchers": "1",
    "principal.builder.class": (
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
    ),
    "producer.id.expiration.ms": "86400000",
    "remote.fetch.max.wait.ms": "500",
    "remote.list.offsets.request.timeout.ms": "30000",
    "remote.log.index.file.cache.total.size.bytes": "1073741824",
    "remote.log.manager.copier.thread.pool.size": "10",
    "remote.log.manager.copy.max.bytes.per.second": "9223372036854775807",
    "remote.log.manager.expiration.thread.pool.size": "10",
    "remote.log.manager.fetch.max.bytes.per.second": "9223372036854775807",
    "remote.log.manager.follower.thread.pool.size": "2",
    "remote.log.reader.threads": "10",
    "replica.alter.log.dirs.io.max.bytes.per.second": "9223372036854775807",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
    "sasl.kerberos.min.time.before.relogin": "60000",
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",
    "sasl.kerberos.service.name": None,
    "sasl.kerberos.ticket.renew.jitter": "0.05",
    "sasl.kerberos.ticket.renew.window.factor": "0.8",
    "sasl.login.refresh.buffer.seconds": "300",
    "sasl.login.refresh.min.period.seconds": "60",
    "sasl.login.refresh.window.factor": "0.8",
    "sasl.login.refresh.window.jitter": "0.05",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "share.coordinator.cached.buffer.max.bytes": "1048588",
    "ssl.cipher.suites": "",
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.engine.factory.class": None,
    "ssl.key.password": None,
    "ssl.keymanager.algorithm": "SunX509",
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.keystore.type": "JKS",
    "ssl.protocol": "TLSv1.3",
    "ssl.provider": None,
    "ssl.secure.random.implementation": None,
    "ssl.trustmanager.algorithm": "PKIX",
    "ssl.truststore.certificates": None,
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.type": "JKS",
    "transaction.partition.verification.enable": "true",
    "unclean.leader.election.enable": "false",
}

# the keys a Kafka broker reads at start-up only: an alteration naming one is refused
STATIC_BROKER_KEYS = frozenset(
    """
    add.partitions.to.txn.retry.backoff.max.ms add.partitions.to.txn.retry.backoff.ms
    advertised.listeners alter.config.policy.class.name
    alter.log.dirs.replication.quota.window.num
    alter.log.dirs.replication.quota.window.size.seconds authorizer.class.name
    auto.create.topics.enable auto.leader.rebalance.enable broker.heartbeat.interval.ms broker.id
    broker.rack broker.session.timeout.ms client.quota.callback.class
    connection.failed.authentication.delay.ms connections.max.idle.ms connections.max.reauth.ms
    controlled.shutdown.enable controller.listener.names
    controller.performance.always.log.threshold.ms controller.performance.sample.period.ms
    controller.quorum.append.linger.ms controller.quorum.auto.join.enable
    controller.quorum.bootstrap.servers controller.quorum.election.backoff.max.ms
    controller.quorum.election.timeout.ms controller.quorum.fetch.max.bytes
    controller.quorum.fetch.snapshot.max.bytes controller.quorum.fetch.timeout.ms
    controller.quorum.request.timeout.ms controller.quorum.retry.backoff.ms
    controller.quorum.voters controller.quota.window.num controller.quota.window.size.seconds
    controller.socket.timeout.ms create.topic.policy.class.name default.replication.factor
    delegation.token.expiry.check.interval.ms delegation.token.expiry.time.ms
    delegation.token.max.lifetime.ms delegation.token.secret.key
    delete.records.purgatory.purge.interval.requests delete.topic.enable early.start.listeners
    fetch.max.bytes fetch.purgatory.purge.interval.requests group.consumer.assignors
    group.consumer.heartbeat.interval.ms group.consumer.max.assignment.interval.ms
    group.consumer.max.heartbeat.interval.ms group.consumer.max.session.timeout.ms
    group.consumer.max.size group.consumer.migration.policy
    group.consumer.min.assignment.interval.ms group.consumer.min.heartbeat.interval.ms
    group.consumer.min.session.timeout.ms group.consumer.regex.refresh.interval.ms
    group.consumer.session.timeout.ms group.coordinator.append.linger.ms
    group.coordinator.background.threads group.coordinator.rebalance.protocols
    group.coordinator.threads group.initial.rebalance.delay.ms group.max.session.timeout.ms
    group.max.size group.min.session.timeout.ms group.share.assignors
    group.share.delivery.count.limit group.share.heartbeat.interval.ms
    group.share.initialize.retry.interval.ms group.share.max.assignment.interval.ms
    group.share.max.delivery.count.limit group.share.max.heartbeat.interval.ms
    group.share.max.partition.max.record.locks group.share.max.record.lock.duration.ms
    group.share.max.session.timeout.ms group.share.max.share.sessions group.share.max.size
    group.share.min.assignment.interval.ms group.share.min.delivery.count.limit
    group.share.min.heartbeat.interval.ms group.share.min.partition.max.record.locks
    group.share.min.record.lock.duration.ms group.share.min.session.timeout.ms
    group.share.partition.max.record.locks group.share.persister.class.name
    group.share.record.lock.duration.ms group.share.session.timeout.ms
    group.streams.heartbeat.interval.ms group.streams.initial.rebalance.delay.ms
    group.streams.max.assignment.interval.ms group.streams.max.heartbeat.interval.ms
    group.streams.max.session.timeout.ms group.streams.max.size group.streams.max.standby.replicas
    group.streams.min.assignment.interval.ms group.streams.min.heartbeat.interval.ms
    group.streams.min.session.timeout.ms group.streams.num.standby.replicas
    group.streams.session.timeout.ms initial.broker.registration.timeout.ms
    inter.broker.listener.name internal.metadata.delete.delay.millis
    internal.metadata.log.segment.bytes internal.metadata.max.batch.size.in.bytes
    kafka.metrics.polling.interval.secs kafka.metrics.reporters
    leader.imbalance.check.interval.seconds log.cleaner.enable log.dir log.dir.failure.timeout.ms
    log.dirs log.flush.offset.checkpoint.interval.ms log.flush.scheduler.interval.ms
    log.flush.start.offset.checkpoint.interval.ms log.initial.task.delay.ms
    log.retention.check.interval.ms log.retention.hours log.retention.minutes log.roll.hours
    log.roll.jitter.hours max.incremental.fetch.session.cache.slots
    max.request.partition.size.limit metadata.log.dir
    metadata.log.max.record.bytes.between.snapshots metadata.log.max.snapshot.interval.ms
    metadata.log.segment.bytes metadata.log.segment.ms metadata.max.idle.interval.ms
    metadata.max.retention.bytes metadata.max.retention.ms metrics.num.samples
    metrics.recording.level metrics.sample.window.ms node.id num.partitions
    num.replica.alter.log.dirs.threads offset.metadata.max.bytes offsets.commit.timeout.ms
    offsets.load.buffer.size offsets.retention.check.interval.ms offsets.retention.minutes
    offsets.topic.compression.codec offsets.topic.num.partitions offsets.topic.replication.factor
    offsets.topic.segment.bytes process.roles producer.id.expiration.check.interval.ms
    producer.purgatory.purge.interval.requests queued.max.request.bytes queued.max.requests
    quota.window.num quota.window.size.seconds remote.log.index.file.cache.ttl.ms
    remote.log.manager.copy.quota.window.num remote.log.manager.copy.quota.window.size.seconds
    remote.log.manager.fetch.quota.window.num remote.log.manager.fetch.quota.window.size.seconds
    remote.log.manager.task.interval.ms remote.log.manager.task.retry.backoff.max.ms
    remote.log.manager.task.retry.backoff.ms remote.log.manager.task.retry.jitter
    remote.log.manager.thread.pool.size remote.log.metadata.custom.metadata.max.bytes
    remote.log.metadata.manager.class.name remote.log.metadata.manager.class.path
    remote.log.metadata.manager.impl.prefix remote.log.metadata.manager.listener.name
    remote.log.reader.max.pending.tasks remote.log.storage.manager.class.name
    remote.log.storage.manager.class.path remote.log.storage.manager.impl.prefix
    remote.log.storage.system.enable replica.fetch.backoff.ms replica.fetch.max.bytes
    replica.fetch.min.bytes replica.fetch.response.max.bytes replica.fetch.wait.max.ms
    replica.high.watermark.checkpoint.interval.ms replica.lag.time.max.ms replica.selector.class
    replica.socket.receive.buffer.bytes replica.socket.timeout.ms replication.quota.window.num
    replication.quota.window.size.seconds request.timeout.ms sasl.client.callback.handler.class
    sasl.login.callback.handler.class sasl.login.class sasl.login.connect.timeout.ms
    sasl.login.read.timeout.ms sasl.login.retry.backoff.max.ms sasl.login.retry.backoff.ms
    sasl.mechanism.controller.protocol sasl.oauthbearer.assertion.algorithm
    sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
    sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include
    sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.private.key.file
    sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.template.file
    sasl.oauthbearer.client.credentials.client.id
    sasl.oauthbearer.client.credentials.client.secret sasl.oauthbearer.clock.skew.seconds
    sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer
    sasl.oauthbearer.jwks.endpoint.refresh.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.url
    sasl.oauthbearer.jwt.retriever.class sasl.oauthbearer.jwt.validator.class
    sasl.oauthbearer.scope sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url sasl.server.callback.handler.class
    sasl.server.max.receive.size security.inter.broker.protocol security.providers
    server.max.startup.time.ms share.coordinator.append.linger.ms
    share.coordinator.cold.partition.snapshot.interval.ms share.coordinator.load.buffer.size
    share.coordinator.snapshot.update.records.per.snapshot
    share.coordinator.state.topic.compression.codec share.coordinator.state.topic.min.isr
    share.coordinator.state.topic.num.partitions share.coordinator.state.topic.prune.interval.ms
    share.coordinator.state.topic.replication.factor share.coordinator.state.topic.segment.bytes
    share.coordinator.threads share.coordinator.write.timeout.ms
    share.fetch.purgatory.purge.interval.requests socket.connection.setup.timeout.max.ms
    socket.connection.setup.timeout.ms socket.listen.backlog.size socket.receive.buffer.bytes
    socket.request.max.bytes socket.send.buffer.bytes ssl.allow.dn.changes ssl.allow.san.changes
    ssl.principal.mapping.rules telemetry.max.bytes
    transaction.abort.timed.out.transaction.cleanup.interval.ms transaction.max.timeout.ms
    transaction.remove.expired.transaction.cleanup.interval.ms
    transaction.state.log.load.buffer.size transaction.state.log.min.isr
    transaction.state.log.num.partitions transaction.state.log.replication.factor
    transaction.state.log.segment.bytes transaction.two.phase.commit.enable
    transactional.id.expiration.ms unclean.leader.election.interval.ms
    unstable.api.versions.enable unstable.feature.versions.enable
    """.split()  # noqa: SIM905 (a data block: one list literal would be 261 lines)
)

# the SSL keys that may change at run time only under a listener's prefix
# (DynamicBrokerConfig.DYNAMIC_SECURITY_CONFIGS)
LISTENER_ONLY_KEYS = frozenset({
    "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type",
    "ssl.truststore.certificates", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.type",
})  # fmt: skip

# listener keys that are cluster-wide although under a listener's prefix
CLUSTER_LEVEL_LISTENER_KEYS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)

# run-time keys KafkaConfig does not define (DynamicConfig.Broker's replication quotas): a
# broker describes them only once set
REPLICATION_QUOTA_KEYS = frozenset(
    {
        "follower.replication.throttled.rate",
        "leader.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)
