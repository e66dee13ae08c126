/* The cleaner's compiled key -> latest offset map, shared by the per-batch calls (_keymap.c)
 * and the interleaved walks over runs of batches (_keymap_runs.c). Private to the
 * extension; the record parsing helpers come from kafkalog/records/_v2_format.h.
 */
#ifndef KAFKALOG_KEYMAP_H
#define KAFKALOG_KEYMAP_H
#include "_v2_format.h"

/* Per-module state (PEP 489, PEP 573): the KeyOffsetMap heap type, and _fastcodec's exception
 * classes, so Python code catches one class whichever extension raised it. */
typedef struct {
    PyObject *corrupt_records;
    PyObject *invalid_records;
    PyObject *key_offset_map;
} KeymapState;

typedef struct {
    Py_ssize_t key; /* offset of the key in the arena; -1 for an empty slot */
    uint32_t hash, len;
    int64_t id; /* the key's index in `latest`: stable while the table grows */
} Slot;

/* One batch the key scan parsed, remembered so the recopy can decide its records without
 * parsing them again: codes[first, first + count) in the record log. */
typedef struct {
    int64_t segment, position, base_offset;
    Py_ssize_t first;
    int32_t count;
} LoggedBatch;

/* A record in the log: its offset delta, and its key's id << 1 | tombstone (no key: -1, or -2
 * for a tombstone). */
typedef struct {
    int32_t offset_delta;
    int32_t code;
} LoggedRecord;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t mask, size, limit;
    Buf arena;
    Buf latest; /* int64 per key id: the key's latest offset */
    int64_t latest_offset;
    /* per-batch scratch, grown to the largest batch seen: spans, timestamps, verdicts, codes */
    RecordSpan *spans;
    int64_t *stamps;
    uint8_t *keep;
    int32_t *codes;
    Py_ssize_t scratch;
    /* the key scan's record log, at most log_limit bytes of records; the recopy reads it in
     * order, from log_cursor */
    Buf logged_batches, logged_records;
    Py_ssize_t log_limit, log_cursor;
} KeyOffsetMap; /* not thread-safe: the key scan uses it without the GIL */

static inline Slot *map_find(KeyOffsetMap *self, const uint8_t *key, uint32_t len, uint32_t hash) {
    Py_ssize_t i = (Py_ssize_t)hash & self->mask;
    for (;;) {
        Slot *s = &self->slots[i];
        if (s->key < 0) return s;
        if (s->hash == hash && s->len == len &&
            (len == 0 || memcmp(self->arena.p + s->key, key, len) == 0)) /* arena may be NULL */
            return s;
        i = (i + 1) & self->mask;
    }
}

static inline int64_t map_get(KeyOffsetMap *self, const uint8_t *key, Py_ssize_t n) {
    Slot *s = map_find(self, key, (uint32_t)n, murmur2(key, n));
    return s->key < 0 ? -1 : ((const int64_t *)self->latest.p)[s->id];
}

typedef struct {
    Py_ssize_t kept, invalid, first;
    int tombstone; /* a kept record is a tombstone */
} Verdicts;

/* the key's id, or -1 on error */
Py_ssize_t map_put(KeyOffsetMap *self, const uint8_t *key, Py_ssize_t n, int64_t offset);
int scratch_reserve(KeyOffsetMap *self, Py_ssize_t count);
int parse_all(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t end, Py_ssize_t count,
              int64_t base_ts, int has_lat, int64_t lat, Damage *damage);
Py_ssize_t map_parsed(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t count,
                      int64_t base_offset, int64_t start, int *full, int *loggable);
void decide(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t count, int64_t base_offset,
            int keep_tombstones, Verdicts *v);

/* The records decide() kept re-encoded against the timestamp `base` into out, as the
 * reference builder writes them; *max_ts and *last_delta are the kept records' greatest
 * timestamp and last offset delta. 0; -1 with an exception (no memory); -2 with InvalidRecords
 * in the reference builder's words (offsets not increasing, a negative timestamp). */
int encode_retained(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t count, int64_t base_offset,
                    int64_t base, Buf *out, int64_t *max_ts, int64_t *last_delta);

PyObject *KeyOffsetMap_map_region(KeyOffsetMap *self, PyObject *args);
PyObject *KeyOffsetMap_filter_region(KeyOffsetMap *self, PyObject *args);

#endif
