/* Shared by the compiled record loops (_fastcodec.c, and the cleaner's _keymap.c): growable
 * buffers, varints with the pure-Python reference's limits, Kafka's murmur2, the v2 record and
 * batch parsers. Header-only, all static inline, and stateless: damage is recorded in the
 * caller's Damage, and each extension raises it with the exception class in its module state.
 */
#ifndef KAFKALOG_V2_FORMAT_H
#define KAFKALOG_V2_FORMAT_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Damage found by a walk: the first thing wrong and where. The helpers below record it here
 * instead of raising, because some walks run without the GIL and none knows which module's
 * exception class to raise; the entry point, which holds its module's state, raises it
 * (raise_damage) or, in a walk that leaves damage to the scanner path, just stops. */
typedef struct {
    const char *message;
    Py_ssize_t position;
} Damage;

static inline int damaged(Damage *damage, const char *message, Py_ssize_t position) {
    if (!damage->message) {
        damage->message = message;
        damage->position = position;
    }
    return -1;
}

/* CorruptRecords(message, position) from what a walk recorded; NULL, for `return` */
static inline PyObject *raise_damage(PyObject *corrupt_records, const Damage *damage) {
    if (!damage->message || PyErr_Occurred()) return NULL;
    PyObject *args = Py_BuildValue("(sn)", damage->message, damage->position);
    if (args) {
        PyErr_SetObject(corrupt_records, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* The cleaner's key scan runs these helpers with the GIL released (see kafkalog/cleaner/_keymap_runs.c), so
 * they allocate with PyMem_Raw* and set an exception only when the GIL is held; without it a
 * failure is just the return code, and the caller raises once it holds the GIL again. */
static inline void no_memory(void) {
    if (PyGILState_Check()) PyErr_NoMemory();
}

/* ---- growable buffers ------------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_RawRealloc(b->p, (size_t)cap);
    if (!p) { no_memory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (n == 0) return 0; /* an empty key or value: src and an unused buffer may be NULL */
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int buf_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static inline int buf_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

/* Arrow binary offsets are int32: a column past 2 GiB must be read in smaller pieces. */
static inline int buf_offset(Buf *offsets, Py_ssize_t data_len) {
    if (data_len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an Arrow binary column would exceed 2 GiB");
        return -1;
    }
    return buf_i32(offsets, (int32_t)data_len);
}

static inline void buf_free(Buf *b) {
    PyMem_RawFree(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- varints, with the reference's limits ------------------------------------------------ */

/* An unsigned varint of at most max_bytes; -1 (damage recorded) when it runs past end or on. */
static inline int read_uvarint(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int max_bytes,
                               uint64_t *out, Damage *damage) {
    uint64_t result = 0;
    Py_ssize_t p = *pos;
    if (p < end && d[p] < 0x80) { /* most lengths and deltas of small records: one byte */
        *out = d[p];
        *pos = p + 1;
        return 0;
    }
    for (int i = 0; i < max_bytes; i++) {
        if (p + i >= end) return damaged(damage, "varint runs past the end of the buffer", p);
        uint8_t b = d[p + i];
        if (i < 10) result |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *out = result;
            *pos = p + i + 1;
            return 0;
        }
    }
    return damaged(damage,
                   max_bytes == 5 ? "varint is longer than 5 bytes" : "varlong is longer than 10 bytes",
                   p);
}

static inline int read_varint32(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int32_t *out,
                                Damage *damage) {
    uint64_t u;
    if (read_uvarint(d, end, pos, 5, &u, damage) < 0) return -1;
    uint32_t v = (uint32_t)u;
    *out = (int32_t)((v >> 1) ^ (~(v & 1) + 1));
    return 0;
}

static inline int read_varint64(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out,
                                Damage *damage) {
    uint64_t u;
    if (read_uvarint(d, end, pos, 10, &u, damage) < 0) return -1;
    *out = (int64_t)((u >> 1) ^ (~(u & 1) + 1));
    return 0;
}

static inline int uvarint_size(uint64_t u) {
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}

/* zigzag in unsigned arithmetic: a left shift of a negative int is undefined in C */
static inline uint64_t zz32(int64_t v) {
    return ((uint32_t)(int32_t)v << 1) ^ (uint32_t)((int32_t)v >> 31);
}
static inline uint64_t zz64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline char *put_uvarint(char *p, uint64_t u) {
    while (u >= 0x80) { *p++ = (char)((u & 0x7F) | 0x80); u >>= 7; }
    *p++ = (char)u;
    return p;
}

/* Kafka's Utils.murmur2 (seed 0x9747b28c), the default partitioner's hash. */
static inline uint32_t murmur2(const uint8_t *d, Py_ssize_t n) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)n;
    Py_ssize_t end = n - n % 4;
    for (Py_ssize_t i = 0; i < end; i += 4) {
        uint32_t k = (uint32_t)d[i] | (uint32_t)d[i + 1] << 8 | (uint32_t)d[i + 2] << 16 |
                     (uint32_t)d[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = h * m ^ k;
    }
    switch (n % 4) {
    case 3: h ^= (uint32_t)d[end + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)d[end + 1] << 8; /* fall through */
    case 1: h ^= d[end]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* ---- one record of a v2 records region (Kafka's DefaultRecord) ------------------------------------------ */

typedef struct {
    Py_ssize_t start, end;   /* [start, end): the record, its length varint included */
    int64_t ts_delta;
    int32_t offset_delta, key_len, value_len, header_count;
    Py_ssize_t key_pos, value_pos, headers_pos; /* headers_pos: after the header count */
} RecordSpan;

/* Well-formed UTF-8 (Unicode 3-7), exactly what Python's strict decoder accepts: no overlong
 * forms, no surrogates, nothing above U+10FFFF. */
static inline int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (uint64_t w; i + 8 <= n; i += 8) { /* header keys are mostly ASCII: 8 at a time */
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL) break;
    }
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        int more;
        uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c == 0xE0) { more = 2; lo = 0xA0; }
        else if (c == 0xED) { more = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) more = 2;
        else if (c == 0xF0) { more = 3; lo = 0x90; }
        else if (c == 0xF4) { more = 3; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) more = 3;
        else return 0;
        if (n - i - 1 < more || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += more + 1;
    }
    return 1;
}

/* Walk the headers from their count at *pos (*first: the first header): lengths in bounds,
 * keys UTF-8 (the reference decodes them to str). */
static inline int check_headers(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t rec_end,
                                Py_ssize_t start, int32_t *count_out, Py_ssize_t *first,
                                Damage *damage) {
    int32_t count;
    if (read_varint32(d, rec_end, pos, &count, damage) < 0) return -1;
    if (count < 0 || count > rec_end - *pos)
        return damaged(damage, "record has an invalid header count", start);
    *first = *pos;
    for (int32_t h = 0; h < count; h++) {
        int32_t n;
        if (read_varint32(d, rec_end, pos, &n, damage) < 0) return -1;
        if (n < 0 || *pos + n > rec_end)
            return damaged(damage, "record has an invalid header key length", start);
        if (!utf8_valid(d + *pos, n))
            return damaged(damage, "record has a header key that is not UTF-8", start);
        *pos += n;
        if (read_varint32(d, rec_end, pos, &n, damage) < 0) return -1;
        if (n < -1 || (n >= 0 && *pos + n > rec_end))
            return damaged(damage, "record has an invalid header value length", start);
        if (n > 0) *pos += n;
    }
    *count_out = count;
    return 0;
}

/* Parse the record at *pos of d[0:end] with the reference's checks, in its order; on success
 * *pos is the next record. Headers are checked, not copied (their bytes start at headers_pos). */
static inline int parse_record(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, RecordSpan *r,
                               Damage *damage) {
    Py_ssize_t start = *pos, p = start;
    int32_t length;
    r->start = start;
    if (read_varint32(d, end, &p, &length, damage) < 0) return -1;
    Py_ssize_t rec_end = p + length;
    if (length < 6 || rec_end > end)
        return damaged(damage, "record declares an invalid length", start);
    p += 1; /* attributes: unused */
    if (read_varint64(d, end, &p, &r->ts_delta, damage) < 0 ||
        read_varint32(d, end, &p, &r->offset_delta, damage) < 0 ||
        read_varint32(d, end, &p, &r->key_len, damage) < 0)
        return -1;
    if (r->key_len < -1) return damaged(damage, "record has an invalid key length", start);
    r->key_pos = p;
    if (r->key_len > 0) p += r->key_len;
    if (p > rec_end) return damaged(damage, "record fields run past its length", start);
    if (read_varint32(d, end, &p, &r->value_len, damage) < 0) return -1;
    if (r->value_len < -1) return damaged(damage, "record has an invalid value length", start);
    r->value_pos = p;
    if (r->value_len > 0) p += r->value_len;
    if (p >= end) return damaged(damage, "record runs past the end of the batch", p);
    if (p >= rec_end) return damaged(damage, "record fields run past its length", start);
    if (d[p] == 0) {
        p += 1;
        r->header_count = 0;
        r->headers_pos = p;
    } else if (check_headers(d, &p, rec_end, start, &r->header_count, &r->headers_pos,
                             damage) < 0) {
        return -1;
    }
    if (p != rec_end)
        return damaged(damage, "record declares a length its fields do not take", start);
    r->end = rec_end;
    *pos = rec_end;
    return 0;
}

/* ---- v2 batch headers (Kafka's DefaultRecordBatch): big-endian fields at fixed offsets ------------------------ */

static inline uint64_t load_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

enum {
    V2_HEADER_SIZE = 61, /* RECORD_BATCH_OVERHEAD */
    LOG_OVERHEAD = 12,   /* base offset + batch length */
    ATTR_COMPRESSION = 0x07, ATTR_LOG_APPEND_TIME = 0x08, ATTR_TRANSACTIONAL = 0x10,
    ATTR_CONTROL = 0x20, ATTR_DELETE_HORIZON = 0x40,
};

typedef struct {
    Py_ssize_t size; /* the whole batch, log overhead included */
    int64_t base_offset, last_offset, base_timestamp, max_timestamp, producer_id;
    int attributes;
    int32_t count;
} BatchHead;

/* The header of the v2 batch at pos, if it is one the compiled walks take whole: complete
 * within end, at most max_size bytes (0: no limit), uncompressed, neither transactional nor a
 * control batch, its next offset within int64. Anything else -- damage included -- is the
 * scanner's to report, in its words. */
static inline int simple_batch(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end,
                               Py_ssize_t max_size, BatchHead *b) {
    if (end - pos < V2_HEADER_SIZE) return 0;
    const uint8_t *h = d + pos;
    int32_t length = (int32_t)load_be(h + 8, 4);
    if (h[16] != 2 || length < V2_HEADER_SIZE - LOG_OVERHEAD) return 0;
    b->size = (Py_ssize_t)length + LOG_OVERHEAD;
    if (b->size > end - pos || (max_size > 0 && b->size > max_size)) return 0;
    b->attributes = (int)load_be(h + 21, 2);
    if (b->attributes & (ATTR_COMPRESSION | ATTR_TRANSACTIONAL | ATTR_CONTROL)) return 0;
    b->base_offset = (int64_t)load_be(h, 8);
    if (__builtin_add_overflow(b->base_offset, (int64_t)(int32_t)load_be(h + 23, 4),
                               &b->last_offset) ||
        b->last_offset == INT64_MAX)
        return 0; /* a damaged base offset: its next offset is beyond int64 */
    b->base_timestamp = (int64_t)load_be(h + 27, 8);
    b->max_timestamp = (int64_t)load_be(h + 35, 8);
    b->producer_id = (int64_t)load_be(h + 43, 8);
    b->count = (int32_t)load_be(h + 57, 4);
    return 1;
}

/* The header's 13 fields, in wire order, as `type` (a tuple subclass: the scanner's
 * RecordBatchHeader); NULL with an exception. */
static inline PyObject *v2_header(PyTypeObject *type, const uint8_t *b) {
    int64_t fields[] = {
        (int64_t)load_be(b, 8),                       /* base offset */
        (int32_t)load_be(b + 8, 4),                   /* batch length */
        (int32_t)load_be(b + 12, 4),                  /* partition leader epoch */
        (int8_t)b[16],                                /* magic */
        (int64_t)load_be(b + 17, 4),                  /* crc, unsigned */
        (int16_t)load_be(b + 21, 2),                  /* attributes */
        (int32_t)load_be(b + 23, 4),                  /* last offset delta */
        (int64_t)load_be(b + 27, 8),                  /* base timestamp */
        (int64_t)load_be(b + 35, 8),                  /* max timestamp */
        (int64_t)load_be(b + 43, 8),                  /* producer id */
        (int16_t)load_be(b + 51, 2),                  /* producer epoch */
        (int32_t)load_be(b + 53, 4),                  /* base sequence */
        (int32_t)load_be(b + 57, 4),                  /* records count */
    };
    enum { N = sizeof fields / sizeof fields[0] };
    PyObject *header = type->tp_alloc(type, N);
    if (!header) return NULL;
    for (Py_ssize_t i = 0; i < N; i++) {
        PyObject *v = PyLong_FromLongLong(fields[i]);
        if (!v) {
            Py_DECREF(header);
            return NULL;
        }
        PyTuple_SET_ITEM(header, i, v);
    }
    return header;
}

#endif
