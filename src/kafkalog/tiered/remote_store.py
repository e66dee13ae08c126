"""A remote store for closed segments: Kafka's RemoteStorageManager over any pyarrow filesystem
(S3-compatible object storage, or a local directory for tests and single machines).

Why pyarrow's filesystems: pyarrow is already a dependency (the columnar reads, the Spark
source), its S3 filesystem is the AWS C++ SDK with ranged reads (a fetch in the middle of a
remote segment reads only those bytes), multipart uploads and S3-compatible endpoints, and the
same interface is a local directory; a Spark executor that has kafkalog has it. boto3, obstore
or fsspec would each add a dependency for what this already does.

The layout (docs/formats.md): each copied segment is one object set under
``<root>/<topic>-<partition>-<topic id>/``, its objects named by the segment's start offset (20
digits, as Kafka names segment files) and the copy's segment id, with Kafka's suffixes:
``00000000000000001000-<segment id>.log`` and ``.index``, ``.timeindex``, ``.snapshot``,
``.txnindex`` (only when the segment has one) and ``.leader_epoch_checkpoint``. A new copy of
the same segment has a new id, so an unfinished copy never shares an object with a finished one.

Refuses: to decide when to copy or delete (the remote log manager's business); to report a
copy done before every object is written; to fail a delete of objects already gone (Kafka's
deleteLogSegmentData is idempotent).
"""

from __future__ import annotations

import dataclasses
import enum
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow.fs

from kafkalog.errors import InvalidArgumentError, KafkaStorageError, RemoteResourceNotFoundError
from kafkalog.records.remote_log_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    decode,
    encode,
)
from kafkalog.storage.atomic import fsync_together
from kafkalog.storage.filenames import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)

COPY_CHUNK = 8 << 20  # bytes moved per read/write while copying a segment file
# written last by a copy and deleted first: a set with one is whole, so a reader of the store
# alone (no metadata topic) knows which segments it may read; the name is the one Aiven's
# RemoteStorageManager for Kafka gives its per-segment manifest
MANIFEST_SUFFIX = ".rsm-manifest"
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType: each with the suffix of its object."""

    OFFSET = INDEX_FILE_SUFFIX
    TIMESTAMP = TIME_INDEX_FILE_SUFFIX
    PRODUCER_SNAPSHOT = PRODUCER_SNAPSHOT_FILE_SUFFIX
    TRANSACTION = TXN_INDEX_FILE_SUFFIX
    LEADER_EPOCH = ".leader_epoch_checkpoint"


@dataclass(frozen=True)
class LogSegmentData:
    """What is copied of one closed segment (Kafka's LogSegmentData): its files, and the
    leader-epoch checkpoint of its range as bytes. ``log_size`` is how much of the ``.log``
    is data (a preallocated file is longer); all of it when None."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot: Path
    leader_epoch_checkpoint: bytes
    log_size: int | None = None


def _copy(source: BinaryIO, out: pyarrow.NativeFile, limit: int | None) -> None:
    left = limit
    while left is None or left > 0:
        chunk = source.read(COPY_CHUNK if left is None else min(COPY_CHUNK, left))
        if not chunk:
            return
        out.write(chunk)
        if left is not None:
            left -= len(chunk)


class RemoteLogStore:
    """Remote segments as object sets under ``root`` of ``filesystem``."""

    def __init__(
        self, filesystem: pyarrow.fs.FileSystem, root: str, uri: str | None = None
    ) -> None:
        self.filesystem = filesystem
        self.root = root.rstrip("/")
        self.uri = uri  # what ``from_uri`` was given: how another process finds the store

    @classmethod
    def from_uri(
        cls, uri: str, *, timeout_ms: int | None = None, attempts: int | None = None
    ) -> RemoteLogStore:
        """A store at ``uri``: ``s3://bucket/prefix?endpoint_override=...&region=...`` (the
        query is pyarrow's S3 URI options), or a local path or ``file://`` URI. On S3,
        ``timeout_ms`` bounds each connection and request and ``attempts`` the tries of each
        call (the SDK's defaults otherwise: a store that is down takes seconds to fail)."""
        try:
            filesystem, root = pyarrow.fs.FileSystem.from_uri(uri)
            if isinstance(filesystem, pyarrow.fs.S3FileSystem) and (timeout_ms or attempts):
                filesystem = _bounded_s3(uri, timeout_ms, attempts)
        except (ValueError, OSError) as err:
            raise InvalidArgumentError(f"remote storage {uri!r}: {err}") from err
        return cls(filesystem, root, uri)

    # --- where things are -----------------------------------------------------------------

    def partition_prefix(self, tp: TopicIdPartition) -> str:
        return f"{self.root}/{tp.topic}-{tp.partition}-{tp.topic_id}"

    def object_name(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        sid = metadata.segment_id
        prefix = self.partition_prefix(sid.topic_id_partition)
        return f"{prefix}/{filename_prefix_from_offset(metadata.start_offset)}-{sid.id}{suffix}"

    # --- Kafka's RemoteStorageManager -------------------------------------------------------

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        """Copy a closed segment's files; returns once every object is written (KafkaStorage
        Error when the store fails: the copy is then unfinished and its objects orphans)."""
        files: list[tuple[str, Path | bytes]] = [
            (LOG_FILE_SUFFIX, data.log_segment),
            (IndexType.OFFSET.value, data.offset_index),
            (IndexType.TIMESTAMP.value, data.time_index),
            (IndexType.PRODUCER_SNAPSHOT.value, data.producer_snapshot),
            (IndexType.LEADER_EPOCH.value, data.leader_epoch_checkpoint),
        ]
        if data.transaction_index is not None:
            files.append((IndexType.TRANSACTION.value, data.transaction_index))
        try:
            self.filesystem.create_dir(
                self.partition_prefix(metadata.segment_id.topic_id_partition)
            )
            for suffix, source in files:
                with self.filesystem.open_output_stream(self.object_name(metadata, suffix)) as out:
                    if isinstance(source, bytes):
                        out.write(source)
                    else:
                        with source.open("rb") as f:
                            limit = data.log_size if suffix == LOG_FILE_SUFFIX else None
                            _copy(f, out, limit)
            local = isinstance(self.filesystem, pyarrow.fs.LocalFileSystem)
            if local:
                # an S3 PUT is durable once answered; a directory's files are once synced,
                # and local retention deletes the segment once the copy is said to be done
                names = [Path(self.object_name(metadata, suffix)) for suffix, _ in files]
                fsync_together(names)
            finished = dataclasses.replace(
                metadata, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            )
            manifest = self.object_name(metadata, MANIFEST_SUFFIX)
            with self.filesystem.open_output_stream(manifest) as out:
                out.write(encode(finished))
            if local:
                fsync_together([Path(manifest), Path(manifest).parent])
        except OSError as err:
            raise KafkaStorageError(
                f"copying {metadata.segment_id.id} to remote storage: {err}"
            ) from err

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        """Bytes ``start`` to ``end`` (inclusive; the segment's end when None) of the remote
        segment's ``.log``, read as one ranged request."""
        if start < 0 or (end is not None and end < start):
            raise InvalidArgumentError(f"the byte range {start}-{end} is not a range")
        name = self.object_name(metadata, LOG_FILE_SUFFIX)
        try:
            with self.filesystem.open_input_file(name) as f:
                size = f.size()
                last = size - 1 if end is None else min(end, size - 1)
                return f.read_at(max(0, last - start + 1), start) if start < size else b""
        except FileNotFoundError as err:
            raise RemoteResourceNotFoundError(f"no remote segment {name}") from err
        except OSError as err:
            raise KafkaStorageError(f"reading {name}: {err}") from err

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index: IndexType) -> bytes:
        """One of the segment's index objects, whole."""
        name = self.object_name(metadata, index.value)
        try:
            with self.filesystem.open_input_stream(name) as f:
                return bytes(f.read())
        except FileNotFoundError as err:
            raise RemoteResourceNotFoundError(f"no remote index {name}") from err
        except OSError as err:
            raise KafkaStorageError(f"reading {name}: {err}") from err

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the segment's objects, its manifest first; those already gone are not an
        error."""
        for suffix in (MANIFEST_SUFFIX, LOG_FILE_SUFFIX, *(i.value for i in IndexType)):
            name = self.object_name(metadata, suffix)
            try:
                self.filesystem.delete_file(name)
            except FileNotFoundError:
                continue
            except OSError as err:
                raise KafkaStorageError(f"deleting {name}: {err}") from err

    def topic_partitions(self) -> list[TopicIdPartition]:
        """Every topic-partition the store holds objects of, from its prefixes."""
        selector = pyarrow.fs.FileSelector(self.root, allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as err:
            raise KafkaStorageError(f"listing {self.root}: {err}") from err
        found = []
        for info in infos:
            # <topic>-<partition>-<topic id>: the topic and the id may both hold '-'
            name = info.base_name
            rest, topic_id = name[:-23], name[-22:]
            topic, _, partition = rest.rpartition("-")
            if name[-23:-22] == "-" and topic and partition.isdigit():
                found.append(TopicIdPartition(topic_id, topic, int(partition)))
        return sorted(found, key=lambda t: (t.topic, t.partition))

    def finished_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The segments whose copies are whole, from their manifests, by start offset: what a
        reader with the store alone may read."""
        found = []
        for start, segment in self.object_sets(tp):
            name = f"{self.partition_prefix(tp)}/{filename_prefix_from_offset(start)}-{segment}"
            try:
                with self.filesystem.open_input_stream(name + MANIFEST_SUFFIX) as f:
                    metadata = decode(bytes(f.read()))
            except FileNotFoundError:
                continue  # being copied, or being deleted
            except OSError as err:
                raise KafkaStorageError(f"reading {name}{MANIFEST_SUFFIX}: {err}") from err
            if isinstance(metadata, RemoteLogSegmentMetadata):
                found.append(metadata)
        return sorted(found, key=lambda m: (m.start_offset, m.event_timestamp_ms))

    def object_sets(self, tp: TopicIdPartition) -> Iterator[tuple[int, str]]:
        """(start offset, segment id) of every object set the store holds for ``tp``, whole or
        not: what a sweep for orphans compares with the metadata."""
        selector = pyarrow.fs.FileSelector(self.partition_prefix(tp), allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as err:
            raise KafkaStorageError(f"listing {selector.base_dir}: {err}") from err
        seen: set[tuple[int, str]] = set()
        for info in infos:
            stem = info.base_name.split(".", 1)[0]
            offset, _, segment = stem.partition("-")
            if offset.isdigit() and len(offset) == 20 and len(segment) == 22:
                seen.add((int(offset), segment))
        yield from sorted(seen)


# pyarrow's S3 URI query keys, passed on as S3FileSystem's arguments of the same meaning
_S3_URI_KEYS = {"region", "scheme", "endpoint_override", "allow_bucket_creation",
                "allow_bucket_deletion", "force_virtual_addressing"}  # fmt: skip


def _bounded_s3(uri: str, timeout_ms: int | None, attempts: int | None) -> pyarrow.fs.S3FileSystem:
    """The S3 filesystem ``uri`` names, with bounded timeouts and retries (which its URI
    form cannot carry)."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
    unknown = set(query) - _S3_URI_KEYS
    if unknown:
        raise ValueError(f"unknown S3 option(s) {sorted(unknown)}")
    options: dict[str, object] = {k: v[-1] for k, v in query.items()}
    for flag in ("allow_bucket_creation", "allow_bucket_deletion", "force_virtual_addressing"):
        if flag in options:
            options[flag] = str(options[flag]).lower() in ("1", "true", "yes")
    if timeout_ms:
        options["connect_timeout"] = options["request_timeout"] = timeout_ms / 1000
    if attempts:
        options["retry_strategy"] = pyarrow.fs.AwsStandardS3RetryStrategy(max_attempts=attempts)
    return pyarrow.fs.S3FileSystem(**options)
