"""Kafka's compression framings (Kafka's org.apache.kafka.common.compress)."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
import textwrap
import threading
import zlib
from pathlib import Path

import cramjam
import lz4.block
import lz4.frame
import pytest
import xxhash
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog import (
    CompressionType,
    CorruptRecordError,
    InvalidConfigError,
    MemoryRecords,
    Record,
    UnsupportedCompressionTypeError,
)
from kafkalog.records import compression as c
from kafkalog.records.batch import rewrite_crc
from kafkalog.records.v2_layout import RECORD_BATCH_OVERHEAD

DATA = b"kafka log storage " * 5000  # 90 KB: several snappy blocks, two LZ4 blocks


@pytest.mark.parametrize("codec", list(CompressionType))
def test_round_trip_every_codec(codec: CompressionType) -> None:
    assert c.decompress(codec, c.compress(codec, DATA)) == DATA


def test_snappy_uses_xerial_framing_with_32k_blocks() -> None:
    out = c.compress(CompressionType.SNAPPY, DATA)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first_block,) = struct.unpack_from(">i", out, 16)
    block = bytes(cramjam.snappy.decompress_raw(out[20 : 20 + first_block]))
    assert block == DATA[: 32 * 1024]


def test_snappy_reader_accepts_a_raw_block() -> None:
    raw = bytes(cramjam.snappy.compress_raw(DATA))
    assert c.decompress(CompressionType.SNAPPY, raw) == DATA


def test_lz4_frame_header_is_kafkas() -> None:
    out = c.compress(CompressionType.LZ4, DATA)
    assert out[:7] == bytes.fromhex("04224d18604082")
    assert out[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum


def test_lz4_magic0_writes_and_accepts_the_broken_header_checksum() -> None:
    out = c.compress(CompressionType.LZ4, DATA, magic=0)
    assert out[:7] == bytes.fromhex("04224d1860401a")
    assert c.decompress(CompressionType.LZ4, out, magic=0) == DATA
    # the same broken checksum is an error for magic 1 and 2
    with pytest.raises(CorruptRecordError, match="checksum"):
        c.decompress(CompressionType.LZ4, out, magic=1)
    # and a correct checksum is also fine for magic 0
    good = c.compress(CompressionType.LZ4, DATA, magic=2)
    assert c.decompress(CompressionType.LZ4, good, magic=0) == DATA


def test_lz4_linked_blocks_are_rejected() -> None:
    linked = lz4.frame.compress(DATA, block_linked=True, block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    with pytest.raises(CorruptRecordError, match="independent"):
        c.decompress(CompressionType.LZ4, linked)


def test_lz4_content_size_and_checksums_are_accepted() -> None:
    framed = lz4.frame.compress(
        DATA, block_linked=False, store_size=True, content_checksum=True, block_checksum=True
    )
    assert c.decompress(CompressionType.LZ4, framed) == DATA


def test_zstd_is_only_for_magic_2() -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match="magic 2"):
        c.compress(CompressionType.ZSTD, DATA, magic=1)
    with pytest.raises(UnsupportedCompressionTypeError):
        MemoryRecords.build([Record(b"x")], magic=0, compression="zstd")


def test_zstd_reads_streamed_frames_without_content_size() -> None:
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    obj = compressor.compressobj()
    frame = obj.compress(DATA) + obj.flush()
    assert c.decompress(CompressionType.ZSTD, frame + frame) == DATA + DATA


def test_gzip_defaults_to_level_6() -> None:
    out = c.compress(CompressionType.GZIP, DATA)
    assert (
        out == zlib.compressobj(6, zlib.DEFLATED, 31).compress(DATA) + b""
        or gzip.decompress(out) == DATA
    )
    level6 = zlib.compressobj(6, zlib.DEFLATED, 31)
    assert out == level6.compress(DATA) + level6.flush()
    assert c.compress(CompressionType.GZIP, DATA, level=-1) == out


def test_gzip_reads_concatenated_members() -> None:
    two = gzip.compress(b"ab", mtime=0) + gzip.compress(b"cd", mtime=0)
    assert c.decompress(CompressionType.GZIP, two) == b"abcd"


def test_unknown_codec_id_is_a_typed_error_naming_the_id() -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match="id: 6") as info:
        CompressionType.from_id(6)
    assert info.value.codec_id == 6
    with pytest.raises(UnsupportedCompressionTypeError, match="brotli"):
        CompressionType.parse("brotli")


def test_levels_are_validated_with_kafka_key_names() -> None:
    with pytest.raises(InvalidConfigError, match=r"compression\.gzip\.level"):
        c.compress(CompressionType.GZIP, DATA, level=10)
    with pytest.raises(InvalidConfigError, match=r"compression\.lz4\.level"):
        c.compress(CompressionType.LZ4, DATA, level=18)
    assert (
        c.decompress(CompressionType.LZ4, c.compress(CompressionType.LZ4, DATA, level=12)) == DATA
    )


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_garbage_and_truncation_raise_corrupt_record(codec: CompressionType) -> None:
    good = c.compress(codec, DATA)
    for bad in (b"", b"\x00" * 20, good[: len(good) // 2], good[:5] + b"\xff" * 40):
        with pytest.raises(CorruptRecordError):
            c.decompress(codec, bad)


def test_zstd_declared_size_one_shot_and_its_fallbacks() -> None:
    """A frame with its size is read in one call; several frames, a frame that lies about its
    size, and a truncated frame go through the stream path, which reads or refuses them."""
    one = zstandard.ZstdCompressor(level=3).compress(b"a" * 5000)
    two = zstandard.ZstdCompressor(level=3).compress(b"b" * 7000)
    assert c.decompress(CompressionType.ZSTD, one) == b"a" * 5000
    assert c.decompress(CompressionType.ZSTD, one + two) == b"a" * 5000 + b"b" * 7000
    # the header's frame content size (one byte after the frame header descriptor) made small
    lying = bytearray(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(b"c" * 200))
    assert zstandard.frame_content_size(bytes(lying)) == 200
    lying[5] = 100
    with pytest.raises(CorruptRecordError):
        c.decompress(CompressionType.ZSTD, bytes(lying))
    with pytest.raises(CorruptRecordError):
        c.decompress(CompressionType.ZSTD, one[:-3])


def test_zstd_decompresses_in_many_threads_at_once(tmp_path: Path) -> None:
    """python-zstandard's decompressor is one native context: four threads sharing one crashed
    the interpreter (SIGSEGV), so this runs in a child process."""
    script = tmp_path / "threads.py"
    script.write_text(
        textwrap.dedent(
            """
            import random, threading
            from kafkalog.records import compression
            from kafkalog.types import CompressionType
            rng = random.Random(1)
            payloads = [bytes(rng.randrange(40) for _ in range(100_000)) * 3 for _ in range(4)]
            frames = [compression.compress(CompressionType.ZSTD, p) for p in payloads]
            wrong = []
            def work(i):
                for _ in range(150):
                    if compression.decompress(CompressionType.ZSTD, frames[i]) != payloads[i]:
                        wrong.append(i)
            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print("wrong", len(wrong))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert done.stdout.split() == ["wrong", "0"]


# --- LZ4 into the thread's reused buffer ----------------------------------------------------


def _lz4_decompressed(frame: bytes, magic: int = 2) -> bytes:
    with c.decompressed(CompressionType.LZ4, frame, magic=magic) as view:
        return bytes(view)


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(max_size=300_000)
    | st.builds(lambda b, n: b * n, st.binary(max_size=64), st.integers(0, 5000)),
    block_size=st.sampled_from(
        [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB, lz4.frame.BLOCKSIZE_MAX1MB]
    ),
    checksums=st.booleans(),
    store_size=st.booleans(),
)
def test_lz4_reused_buffer_reads_what_the_library_reads(
    data: bytes, block_size: int, checksums: bool, store_size: bool
) -> None:
    """Every frame the library writes (incompressible data makes stored blocks; checksums or a
    content size send the frame to the library) comes back as the library reads it."""
    frame = lz4.frame.compress(
        data,
        block_size=block_size,
        block_linked=False,
        content_checksum=checksums,
        block_checksum=checksums,
        store_size=store_size,
    )
    assert _lz4_decompressed(frame) == lz4.frame.decompress(frame) == data
    assert _lz4_decompressed(c.compress(CompressionType.LZ4, data, magic=0), magic=0) == data


@pytest.mark.parametrize("checksums", [False, True])
@pytest.mark.parametrize("store_size", [False, True])
def test_lz4_frame_of_one_block_is_the_librarys_to_read(checksums: bool, store_size: bool) -> None:
    """A small batch's frame goes to the library whole (cheaper than the block walk there);
    a frame of more blocks to the reused buffer."""

    def frame(data: bytes) -> bytes:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=checksums,
            block_checksum=checksums,
            store_size=store_size,
        )

    with c.decompressed(CompressionType.LZ4, frame(DATA[:1000])) as one:
        assert isinstance(one, bytes) and one == DATA[:1000]
    two = DATA * (70_000 // len(DATA) + 1)
    with c.decompressed(CompressionType.LZ4, frame(two)) as view:
        assert isinstance(view, memoryview) and bytes(view) == two
        assert isinstance(view.obj, bytearray) or checksums or store_size


def test_lz4_reused_buffer_refuses_damage_as_corrupt_records() -> None:
    good = c.compress(CompressionType.LZ4, DATA)
    assert _lz4_decompressed(good + b"x") == DATA  # bytes after the end mark: the library's way
    first = struct.unpack_from("<I", good, 7)[0]
    flipped = bytearray(good)
    flipped[11 + first // 2] ^= 0xFF  # inside the first block's sequences
    stored_too_big = good[:7] + struct.pack("<I", 0x80000000 | 70_000) + bytes(70_000) + bytes(4)
    for bad in (
        b"",
        good[:5] + b"\xff" * 40,
        good[:-4],  # no end mark: the library says the frame is truncated
        bytes(flipped),
        stored_too_big,
        c.compress(CompressionType.LZ4, DATA, magic=0),  # magic 0's checksum for magic 2
    ):
        with pytest.raises(CorruptRecordError):
            _lz4_decompressed(bad)


def test_lz4_reused_buffer_is_one_per_thread_and_never_shared_while_in_use() -> None:
    a, b = (  # frames of two 64 KiB blocks: one block is the library's to read
        c.compress(CompressionType.LZ4, b"a" * 100_000),
        c.compress(CompressionType.LZ4, b"b" * 70_000),
    )
    with c.decompressed(CompressionType.LZ4, a) as outer:
        kept = outer
        with c.decompressed(CompressionType.LZ4, b) as inner:  # as a collector callback might
            assert bytes(inner) == b"b" * 70_000
        assert bytes(outer) == b"a" * 100_000  # the nested use wrote elsewhere
    with pytest.raises(ValueError, match="released"):
        bytes(kept)  # a view kept past the block fails loudly
    huge = c.compress(CompressionType.LZ4, bytes(c.SCRATCH_KEEP_MAX + 1))
    with c.decompressed(CompressionType.LZ4, huge) as big:
        assert len(big) == c.SCRATCH_KEEP_MAX + 1
    with c.decompressed(CompressionType.LZ4, b) as small:
        assert len(small.obj) <= c.SCRATCH_KEEP_MAX  # the huge buffer was not kept


def test_lz4_batches_decode_alike_in_many_threads(tmp_path: Path) -> None:
    records = [Record(b"v%d" % i * 50, b"k%d" % i) for i in range(2000)]
    data = bytes(MemoryRecords.build(records, compression="lz4"))
    wrong: list[int] = []

    def work() -> None:
        for _ in range(50):
            got = [r.value for r in MemoryRecords(data).records()]
            if got != [r.value for r in records]:
                wrong.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_lz4_frame_of_many_tiny_blocks_reserves_what_its_bytes_can_make() -> None:
    """A frame declaring 4 MiB blocks in 100,000 blocks of a few bytes each: reserving the
    declared block size for each would be 400 GB (a producer could stop the broker with one
    batch); what is reserved follows what the blocks can hold."""
    descriptor = bytes([0x60, 0x70])  # version 1, independent blocks; 4 MiB blocks
    header = c.LZ4_MAGIC + descriptor + bytes([(xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF])
    block = lz4.block.compress(b"ab", store_size=False)
    frame = header + (struct.pack("<I", len(block)) + block) * 100_000 + bytes(4)
    with c.decompressed(CompressionType.LZ4, frame) as view:
        assert bytes(view) == b"ab" * 100_000
        assert len(view.obj) <= 2 * 255 * len(frame)
    assert lz4.frame.decompress(frame) == b"ab" * 100_000  # a frame the library reads alike


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
@pytest.mark.parametrize("count", [3, 3000])  # LZ4: one block, read whole; several, by block
def test_a_damaged_payload_is_the_batch_s_invalid_records(
    codec: CompressionType, count: int
) -> None:
    """Every reader of a batch's records (objects, Arrow columns) says which batch."""
    records = [Record(b"value %d " % i * 6, b"k%d" % (i % 7)) for i in range(count)]
    data = bytearray(bytes(MemoryRecords.build(records, compression=codec, base_offset=40)))
    middle = RECORD_BATCH_OVERHEAD + (len(data) - RECORD_BATCH_OVERHEAD) // 2
    data[middle : middle + 8] = b"\xff" * 8
    rewrite_crc(data, 0)
    for read in (
        lambda: next(MemoryRecords(data).batches()).records(),
        MemoryRecords(data).to_arrow,
    ):
        with pytest.raises(CorruptRecordError, match="batch records are invalid") as raised:
            read()
        assert raised.value.offset == 40
