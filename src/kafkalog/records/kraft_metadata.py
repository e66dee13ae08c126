"""Topic and broker configs, and ACLs, replayed from KRaft metadata records, as Kafka's
ConfigurationControlManager and AclControlManager replay them.

Why: a Kafka broker keeps each topic's config overrides, and the dynamic broker configs
(``kafka-configs --entity-type brokers --alter``) that set defaults for every topic, in its
metadata log, not beside the partitions; the manager needs them for topics a broker created
(``manager/kraft_configs.py`` reads the files). A record's value is MetadataRecordSerde's
frame (frame version 1, api key and version as unsigned varints) around a flexible message of
Kafka's own schema (``metadata_schemas``). A record it cannot read (damaged, or of a version
newer than it knows) is skipped and named in ``problems``; a damaged batch ends the replay, as
Kafka's log recovery ends the log there: what came before still counts, rather than every
config falling back to a default. Refuses: I/O, and every record but TopicRecord, ConfigRecord
of a TOPIC or BROKER resource (a null value deletes the key), RemoveTopicRecord (which drops
the topic's keys), AccessControlEntryRecord and RemoveAccessControlEntryRecord (by the ACL's
id), and ClientQuotaRecord.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from kafkalog.errors import CorruptRecordError, KafkaLogError
from kafkalog.records.metadata_schemas import SCHEMAS
from kafkalog.records.scanner import AnyBatch
from kafkalog.records.schema_reader import SchemaReader

_TOPIC_RECORD, _CONFIG_RECORD, _REMOVE_TOPIC_RECORD = 2, 4, 9
_ACL_RECORD, _REMOVE_ACL_RECORD, _QUOTA_RECORD = 18, 19, 14
_READ = (
    _TOPIC_RECORD, _CONFIG_RECORD, _REMOVE_TOPIC_RECORD, _ACL_RECORD, _REMOVE_ACL_RECORD,
    _QUOTA_RECORD,
)  # fmt: skip
# a client quota's entity: its (entity type, name) pairs, sorted; a None name is the default
QuotaEntity = tuple[tuple[str, str | None], ...]
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4  # ConfigResource.Type


class MetadataConfigs(NamedTuple):
    """The configs a metadata log holds, for the resources that have any."""

    topics: dict[str, dict[str, str]]  # topic name -> its overrides
    brokers: dict[str, dict[str, str]]  # broker id, or "" for every broker -> its dynamic configs
    problems: list[str]  # what could not be read, and where
    # the ACLs in force: AccessControlEntryRecord fields (resourceType, resourceName,
    # patternType, principal, host, operation, permissionType), in the order they were added
    acls: list[dict[str, Any]]
    quotas: dict[QuotaEntity, dict[str, float]]  # client quotas (ClientQuotaRecord)


def replay_configs(batches: Iterable[AnyBatch]) -> MetadataConfigs:
    """The configs after the records of ``batches`` (a snapshot's, then the log's after it)."""
    names: dict[str, str] = {}  # topic id -> name
    configs: dict[str, dict[str, str]] = {}
    brokers: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    acls: dict[str, dict[str, Any]] = {}  # by the ACL's id
    quotas: dict[QuotaEntity, dict[str, float]] = {}
    try:
        for batch in batches:
            if batch.is_control:
                continue
            for record in batch:
                try:
                    decoded = _decode(record.value)
                except CorruptRecordError as err:
                    problems.append(f"record at offset {record.offset} skipped: {err}")
                    continue
                if decoded is None:
                    continue
                api_key, data = decoded
                if api_key == _TOPIC_RECORD:
                    names[data["topicId"]] = data["name"]
                elif api_key == _REMOVE_TOPIC_RECORD:
                    configs.pop(names.pop(data["topicId"], ""), None)
                elif api_key == _ACL_RECORD:
                    acls[data["id"]] = data
                elif api_key == _REMOVE_ACL_RECORD:
                    acls.pop(data["id"], None)
                elif api_key == _QUOTA_RECORD:
                    entity = tuple(
                        sorted((e["entityType"], e["entityName"]) for e in data["entity"])
                    )
                    quota = quotas.setdefault(entity, {})
                    if data["remove"]:
                        quota.pop(data["key"], None)
                    else:
                        quota[data["key"]] = data["value"]
                elif data["resourceType"] in (_TOPIC_RESOURCE, _BROKER_RESOURCE):
                    resources = configs if data["resourceType"] == _TOPIC_RESOURCE else brokers
                    values = resources.setdefault(data["resourceName"], {})
                    if data["value"] is None:
                        values.pop(data["name"], None)
                    else:
                        values[data["name"]] = data["value"]
    except KafkaLogError as err:
        problems.append(f"replay stopped at damage: {err}")
    return MetadataConfigs(
        {topic: values for topic, values in configs.items() if values},
        {broker: values for broker, values in brokers.items() if values},
        problems,
        list(acls.values()),
        {entity: values for entity, values in quotas.items() if values},
    )


def _decode(value: bytes | None) -> tuple[int, dict[str, Any]] | None:
    """(api key, fields) of a record ``replay_configs`` reads; None for any other record (or
    frame version)."""
    reader = SchemaReader(value or b"", flexible=True, what="a metadata record")
    if reader.uvarint() != 1:
        return None
    api_key, version = reader.uvarint(), reader.uvarint()
    if api_key not in _READ:
        return None
    name, versions, fields = SCHEMAS[api_key]
    newest = cast(tuple[int, int], versions)[1]
    if version > newest:  # its fields may not be where this version's are
        raise CorruptRecordError(f"{name} version {version} is newer than {newest}")
    return api_key, reader.struct(fields, version)  # type: ignore[arg-type]
