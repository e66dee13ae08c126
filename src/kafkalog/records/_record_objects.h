/* The Record type of _fastcodec and its loops (see _record_objects.c), declared for
 * _fastcodec.c, which defines the module from them; the module state they read is
 * _codec_state.h's. */
#ifndef KAFKALOG_RECORD_OBJECTS_H
#define KAFKALOG_RECORD_OBJECTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* kafkalog.records.record.Record's fields, as its pure-Python definition names them */
typedef struct {
    PyObject_HEAD
    PyObject *value, *key, *headers, *timestamp, *offset;
} RecordObject;

#define R(obj) ((RecordObject *)(obj))

/* Records freed, kept for the next decode as CPython keeps tuples and Cython's freelist
 * classes keep theirs: a reused record costs neither an allocation nor a tick of the cycle
 * collector's young-generation count. Per module instance (its own Record type). */
enum { RECORD_FREELIST_MAX = 2048 };
/* Likewise the header lists of freed records that nothing else held: emptied, untracked, each
 * keeping its item array, so a decoded record's headers cost no list, item array or cycle-
 * collector link of their own. */
enum { HEADER_LIST_FREELIST_MAX = 2048, HEADER_LIST_KEEP_ALLOCATED = 8 };
typedef struct {
    int count;
    PyObject *items[RECORD_FREELIST_MAX]; /* raw memory of untracked records, type released */
    int list_count;
    PyObject *lists[HEADER_LIST_FREELIST_MAX]; /* live empty lists, one reference each */
} RecordFreelist;

void record_freelist_clear(RecordFreelist *freelist);

extern PyType_Spec record_type_spec;
extern PyMethodDef record_methods[]; /* decode_records, encode_records, record_facts */
extern PyMethodDef search_methods[]; /* search_offset, in _batch_search.c */
extern PyMethodDef producer_batch_methods[]; /* producer_batch, in _producer_batch.c */

PyObject *records_encode(PyObject *module, PyObject *args);
PyObject *records_facts(PyObject *module, PyObject *records);

#endif
