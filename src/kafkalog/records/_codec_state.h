/* _fastcodec's per-module state and its accessors, for every file of the module: the module
 * definition (_fastcodec.c) fills it at exec; the Record loops (_record_objects.c,
 * _record_encode.c, _batch_search.c) only read it. Kept apart so that those files need
 * nothing of _fastcodec.c, and the module's files depend one way: the definition on its parts.
 */
#ifndef KAFKALOG_CODEC_STATE_H
#define KAFKALOG_CODEC_STATE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_record_objects.h"

/* Per-module state (PEP 489 multi-phase init, PEP 573): each interpreter that imports the
 * module gets its own exception classes and ColumnBuilder type; no C global holds an object. */
typedef struct {
    PyObject *corrupt_records; /* (message, position) -> CorruptRecordError in Python */
    PyObject *invalid_records; /* (message,) -> InvalidRecordError */
    PyObject *column_builder;  /* the heap type */
    PyObject *record;          /* the Record heap type */
    RecordFreelist free_records;
} CodecState;

static inline CodecState *codec_state(PyObject *module) {
    return (CodecState *)PyModule_GetState(module);
}

/* the Record heap type of this module instance */
static inline PyTypeObject *codec_record_type(PyObject *module) {
    return (PyTypeObject *)codec_state(module)->record;
}

/* CorruptRecords(message, position), raised as CorruptRecordError by the Python side */
static inline PyObject *codec_corrupt_records(PyObject *module) {
    return codec_state(module)->corrupt_records;
}

/* NULL once the module is cleared */
static inline RecordFreelist *codec_record_freelist(PyObject *module) {
    CodecState *st = codec_state(module);
    return st && st->record ? &st->free_records : NULL;
}

#endif
