"""Kafka's compression framings over well-kept codec libraries.

Why: the codecs are libraries' work (zlib, cramjam's snappy, lz4, zstandard); the *framings* are
Kafka's own and must match byte for byte what a broker reads and writes (Kafka's
org.apache.kafka.common.compress): snappy in snappy-java's xerial stream framing, LZ4 frames with
independent 64 KiB blocks and the magic-0 header-checksum quirk, zstd only for magic 2, gzip at
level 6 by default. Refuses: any codec exception escaping (all become CorruptRecordError) and any
I/O.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import cramjam
import lz4.frame
import xxhash
import zstandard

from kafkalog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    UnsupportedCompressionTypeError,
)
from kafkalog.types import CompressionType

Buffer = bytes | bytearray | memoryview

GZIP_DEFAULT_LEVEL = 6  # Kafka's -1 means zlib's default, which is 6
LZ4_DEFAULT_LEVEL = 9
ZSTD_DEFAULT_LEVEL = 3

_LEVEL_RANGES = {
    CompressionType.GZIP: ("compression.gzip.level", 1, 9),
    CompressionType.LZ4: ("compression.lz4.level", 1, 17),
    CompressionType.ZSTD: ("compression.zstd.level", -131072, 22),
}


def check_level(codec: CompressionType, level: int | None) -> int | None:
    """Validate a Kafka compression level; ``None`` (or -1 for gzip) means the codec default."""
    if level is None or codec not in _LEVEL_RANGES:
        return None
    key, low, high = _LEVEL_RANGES[codec]
    if codec is CompressionType.GZIP and level == -1:
        return None
    if not low <= level <= high:
        raise InvalidConfigError(key, f"{level} is outside [{low}, {high}]")
    return level


# --- snappy: xerial (snappy-java) stream framing ------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")


def _snappy_compress(data: Buffer) -> bytes:
    out = [XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        # snappy-java's reader treats input without the stream magic as one raw block
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError("snappy stream header is truncated")
    pos = len(XERIAL_HEADER)
    out = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("snappy block length is truncated", position=pos)
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CorruptRecordError(
                f"snappy block of {size} bytes runs past the end", position=pos
            )
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(out)


# --- LZ4 frames ---------------------------------------------------------------------------------

LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_VERSION_MASK = 0xC0
_LZ4_FLG_VERSION_1 = 0x40
_LZ4_FLG_INDEPENDENT = 0x20
_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_CONTENT_CHECKSUM = 0x04
_LZ4_FLG_RESERVED = 0x03
_LZ4_BD_RESERVED = 0x8F


def _lz4_header_checksum(descriptor: Buffer) -> int:
    return (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF


def _lz4_compress(data: Buffer, level: int | None, magic: int) -> bytes:
    level = LZ4_DEFAULT_LEVEL if level is None else level
    # Kafka's default level uses the fast compressor; any other level the HC one
    lib_level = 0 if level == LZ4_DEFAULT_LEVEL else max(3, min(level, 16))
    out = lz4.frame.compress(
        data,
        compression_level=lib_level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    if magic == 0:
        # Old Kafka hashed magic+FLG+BD instead of FLG+BD; readers of magic 0 expect that value.
        patched = bytearray(out)
        patched[6] = _lz4_header_checksum(patched[0:6])
        return bytes(patched)
    return bytes(out)


def _lz4_frame(data: Buffer, magic: int) -> memoryview:
    """The frame checked as Kafka's KafkaLZ4BlockInputStream checks it (a magic-0 header
    checksum repaired for the library, which always verifies it)."""
    view = memoryview(data)
    if len(view) < 7 or view[:4] != LZ4_MAGIC:
        raise CorruptRecordError("LZ4 frame has no magic number")
    flg, bd = view[4], view[5]
    if flg & _LZ4_FLG_RESERVED:
        raise CorruptRecordError("LZ4 frame descriptor has reserved FLG bits set")
    if flg & _LZ4_FLG_VERSION_MASK != _LZ4_FLG_VERSION_1:
        raise CorruptRecordError("LZ4 frame version is not 1")
    if not flg & _LZ4_FLG_INDEPENDENT:
        raise CorruptRecordError("LZ4 frame uses linked blocks; Kafka requires independent blocks")
    if bd & _LZ4_BD_RESERVED or not 4 <= (bd >> 4) & 0x07 <= 7:
        raise CorruptRecordError("LZ4 frame has an invalid block descriptor")
    hc_pos = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0)
    if len(view) <= hc_pos:
        raise CorruptRecordError("LZ4 frame header is truncated")
    expected = _lz4_header_checksum(view[4:hc_pos])
    if view[hc_pos] != expected:
        if magic != 0:
            raise CorruptRecordError("LZ4 frame header checksum mismatch")
        # magic 0: Kafka never verifies the (historically broken) checksum; repair it for the
        # library, which always verifies.
        patched = bytearray(view)
        patched[hc_pos] = expected
        view = memoryview(patched)
    return view


def _lz4_decompress(data: Buffer, magic: int) -> bytes:
    return bytes(lz4.frame.decompress(_lz4_frame(data, magic)))


_LZ4_FLG_CHECKSUMS_OR_SIZE = (
    _LZ4_FLG_BLOCK_CHECKSUM | _LZ4_FLG_CONTENT_SIZE | _LZ4_FLG_CONTENT_CHECKSUM
)
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_UINT32_LE = struct.Struct("<I")


def _lz4_plain_blocks(view: memoryview) -> tuple[list[tuple[int, int]], int] | None:
    """The (position, size word) of each block of a checked frame with no checksums and no
    content size, which is what Kafka's and this codec's writers make, and the most a block
    holds; None for any other frame or one that does not end where its end mark says (the
    library then decompresses it and says what is wrong)."""
    flg, bd = view[4], view[5]
    if flg & _LZ4_FLG_CHECKSUMS_OR_SIZE:
        return None
    pos, end = 7, len(view)
    blocks: list[tuple[int, int]] = []
    while pos + 4 <= end:
        (word,) = _UINT32_LE.unpack_from(view, pos)
        pos += 4
        if word == 0:
            return (blocks, 1 << (8 + 2 * ((bd >> 4) & 0x07))) if pos == end else None
        blocks.append((pos, word))
        pos += word & ~_LZ4_UNCOMPRESSED_BLOCK
    return None


# LZ4's densest sequence turns each match-length byte into 255 bytes: no block yields more than
# 255 bytes per byte it holds (a bound on what a frame of many tiny blocks may make us reserve)
_LZ4_MAX_RATIO = 255


def _lz4_decompress_into(view: memoryview, magic: int, scratch: bytearray | None) -> memoryview:
    """The frame's content in ``scratch`` (grown as needed), block by block: one buffer the
    caller reuses, where the library's frame reader grows a fresh one by copies (a third of the
    time of a 1 MiB batch). Any other frame goes to the library."""
    frame = _lz4_frame(view, magic)
    plain = _lz4_plain_blocks(frame)
    if plain is None:
        return memoryview(lz4.frame.decompress(frame))
    blocks, block_max = plain
    out = scratch if scratch is not None else bytearray()
    at = 0
    for pos, word in blocks:
        size = word & ~_LZ4_UNCOMPRESSED_BLOCK
        stored = word & _LZ4_UNCOMPRESSED_BLOCK
        if stored and size > block_max:
            raise CorruptRecordError("LZ4 stored block is larger than the block size")
        room = size if stored else min(block_max, size * _LZ4_MAX_RATIO)
        if at + room > len(out):
            out += bytes(max(at + room, 2 * len(out)) - len(out))
        with memoryview(out) as target:
            if stored:
                target[at : at + size] = frame[pos : pos + size]
                at += size
            else:
                space = target[at : at + room]
                at += cramjam.lz4.decompress_block_into(frame[pos : pos + size], space, room)
                space.release()
    return memoryview(out)[:at]


# --- gzip and zstd ------------------------------------------------------------------------------


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    compressor = zlib.compressobj(GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: Buffer) -> bytes:
    out = []
    rest: Buffer = data
    while True:
        d = zlib.decompressobj(31)
        out.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError("gzip stream is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


# Neither a compressor nor a decompressor may be used by two threads at once (python-zstandard
# shares one native context per instance and releases the GIL while it works: two threads
# decompressing through one instance crashed the process), and both are costly to create.
_ZSTD_COMPRESSORS = threading.local()
_ZSTD_DECOMPRESSORS = threading.local()


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    level = ZSTD_DEFAULT_LEVEL if level is None else level
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_ZSTD_COMPRESSORS, "by_level", None)
    if cache is None:
        cache = _ZSTD_COMPRESSORS.by_level = {}
    compressor = cache.get(level)
    if compressor is None:
        compressor = cache[level] = zstandard.ZstdCompressor(level=level)
    return compressor.compress(data)


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_ZSTD_DECOMPRESSORS, "one", None)
    if decompressor is None:
        decompressor = _ZSTD_DECOMPRESSORS.one = zstandard.ZstdDecompressor()
    return decompressor


# A frame that declares its size is decompressed in one call when the size is believable (a
# header can claim any size; zstd rarely beats 64:1 on records); else the stream path runs.
_ZSTD_ONE_SHOT_RATIO = 64
_ZSTD_ONE_SHOT_MAX = 64 << 20


def _zstd_decompress(data: Buffer) -> bytes:
    if not len(data):
        raise CorruptRecordError("zstd stream is empty")
    decompressor = _zstd_decompressor()
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        declared = -1  # not a frame header: the stream path below says what is wrong
    if 0 < declared <= min(_ZSTD_ONE_SHOT_MAX, len(data) * _ZSTD_ONE_SHOT_RATIO):
        try:
            return bytes(decompressor.decompress(data, allow_extra_data=False))
        except zstandard.ZstdError:
            pass  # several frames, or damage: the stream path tells which
    # zstd-jni writes frames without a content size, and may write several
    out = []
    rest: Buffer = data
    while rest:
        d = decompressor.decompressobj()
        out.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError("zstd stream is truncated")
        rest = d.unused_data
    return b"".join(out)


# --- dispatch -----------------------------------------------------------------------------------


def check_codec_for_magic(codec: CompressionType, magic: int) -> None:
    if codec is CompressionType.ZSTD and magic < 2:
        raise UnsupportedCompressionTypeError(
            f"zstd compression requires magic 2, not {magic}", codec_id=int(codec)
        )


def compress(
    codec: CompressionType, data: Buffer, *, magic: int = 2, level: int | None = None
) -> bytes:
    """Compress ``data`` with Kafka's framing for ``codec``."""
    check_codec_for_magic(codec, magic)
    level = check_level(codec, level)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        return _gzip_compress(data, level)
    if codec is CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec is CompressionType.LZ4:
        return _lz4_compress(data, level, magic)
    return _zstd_compress(data, level)


# One output buffer per thread for decompressed(): kept up to this size, so a thread that once
# read a huge batch does not hold its size for good.
_SCRATCH = threading.local()
SCRATCH_KEEP_MAX = 8 << 20


def decompressed(
    codec: CompressionType, data: Buffer, *, magic: int = 2
) -> AbstractContextManager[Buffer]:
    """The payload decompressed, for use inside the ``with`` block only: an LZ4 frame of
    several blocks is decompressed into this thread's reused buffer, whose view is released on
    leaving (a view kept past the block fails loudly rather than show the next batch). A nested
    use, as from a collector callback in the middle of a decode, gets a buffer of its own.
    Other codecs, and none, cost no generator a batch; nor does an LZ4 frame of one block,
    which the library reads in a third of the time the block walk takes on a small batch."""
    if reads_in_scratch(codec, data):
        return _lz4_in_scratch(data, magic)
    return nullcontext(decompress(codec, data, magic=magic) if codec else data)


def reads_in_scratch(codec: CompressionType, data: Buffer) -> bool:
    """Whether ``decompressed`` reads ``data`` into the thread's reused buffer; any other
    payload it decompresses up front into bytes of its own, as ``decompress`` does."""
    return codec is CompressionType.LZ4 and not _lz4_one_block(data)


def _lz4_one_block(data: Buffer) -> bool:
    """Whether the frame ends right after its first block (a guess from the first size word:
    both paths check the whole frame, so a wrong guess costs time, never a wrong answer)."""
    if len(data) < 11:
        return False
    view = data if isinstance(data, memoryview) else memoryview(data)
    flg = view[4]
    at = 7 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0)
    if len(view) < at + 4:
        return False
    word: int = _UINT32_LE.unpack_from(view, at)[0]
    block_end = at + 4 + (word & ~_LZ4_UNCOMPRESSED_BLOCK)
    block_end += 4 if flg & _LZ4_FLG_BLOCK_CHECKSUM else 0
    return len(view) == block_end + 4 + (4 if flg & _LZ4_FLG_CONTENT_CHECKSUM else 0)


@contextmanager
def _lz4_in_scratch(data: Buffer, magic: int) -> Iterator[Buffer]:
    scratch: bytearray | None = getattr(_SCRATCH, "buffer", None)
    _SCRATCH.buffer = None
    try:
        view = _lz4_decompress_into(memoryview(data), magic, scratch)
    except Exception as err:
        _SCRATCH.buffer = scratch
        if isinstance(err, CorruptRecordError):
            raise
        # the codec library's own types: all mean corrupt data
        raise CorruptRecordError(
            f"cannot decompress lz4 payload: {type(err).__name__}: {err}"
        ) from err
    try:
        yield view
    finally:
        used = view.obj
        view.release()
        if isinstance(used, bytearray):  # the scratch, grown or new
            _SCRATCH.buffer = used if len(used) <= SCRATCH_KEEP_MAX else None
        else:  # the library's output: the scratch was not touched
            _SCRATCH.buffer = scratch


def decompress(codec: CompressionType, data: Buffer, *, magic: int = 2) -> bytes:
    """Decompress a Kafka-framed payload; any failure is a CorruptRecordError."""
    check_codec_for_magic(codec, magic)
    try:
        if codec is CompressionType.NONE:
            return bytes(data)
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data)
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data, magic)
        return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as err:  # every codec library raises its own types; all mean corrupt data
        raise CorruptRecordError(
            f"cannot decompress {codec.kafka_name} payload: {type(err).__name__}: {err}"
        ) from err
