/* obj_snap_decode.h -- a hand-written decoder of the host objects section of a
 * snapshot (hostrec.HostSnapshot, proto/host_records.proto) that hands its
 * records to a callback one at a time, decoded into scratch storage reused
 * from record to record, instead of protobuf-c's whole-message unpack (at
 * 200,000 objects an arena of some 100 MB, faulted in page by page). It
 * accepts and refuses exactly the bytes protobuf-c 1.4's
 * hostrec__host_snapshot__unpack does, and gives the same field values
 * (fuzz_snapshot checks both against protobuf-c); the one difference is the
 * content of an ObjectRecord's add_replica, which is only reported present
 * (a snapshot refuses any record carrying it). Internal to
 * host_shim/master/obj_store*.c and its tests. */
#ifndef OBJ_SNAP_DECODE_H
#define OBJ_SNAP_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "host_records.pb-c.h"

/* The repeated fields of HostSnapshot, as a mask of what to decode. */
enum {
    OBJ_SNAP_SEGMENTS = 1u << 0, /* field 2, Hostrec__SegmentRecord */
    OBJ_SNAP_GROUPS = 1u << 1,   /* field 3, Hostrec__GroupRecord */
    OBJ_SNAP_OBJECTS = 1u << 2,  /* field 4, Hostrec__ObjectRecord */
    OBJ_SNAP_OPEN_PUTS = 1u << 3, /* field 5, Hostrec__HandedPut */
    OBJ_SNAP_ZONES = 1u << 4,     /* field 6, Hostrec__WriteZones */
    OBJ_SNAP_ALL = 31u
};

/* Scratch storage a decode reuses from record to record: zero it before the
 * first decode, obj_snap_dec_fini after the last. */
typedef struct obj_snap_dec {
    char *str;               /* the strings of one record, NUL-terminated */
    size_t strcap;
    Hostrec__Replica *reps;  /* the replicas of one object record */
    Hostrec__Replica **repp; /* and the pointer array the record shows */
    size_t repcap;
    Hostrec__Replica add;    /* an add_replica, decoded to check it only */
} obj_snap_dec;

/* Called with each record of a field in `fields`, in the order of the bytes;
 * what (an OBJ_SNAP_* bit) says which message msg is. The message and its
 * strings are valid until the callback returns. A negative return stops the
 * decode and is returned. */
typedef int (*obj_snap_fn)(void *arg, unsigned what, const ProtobufCMessage *msg);

/* Decode the section data[0..len) (data may be NULL when len is 0). Records
 * of fields outside `fields` are skipped without decoding them (only their
 * framing is read: decode once with OBJ_SNAP_ALL to check every byte).
 * *format (when not NULL) receives the last format field (0 when none).
 * Returns SMP_OK, SMP_EPROTO on bytes protobuf-c refuses (a record handed out
 * before the bad bytes were reached has been seen by fn), SMP_ENOMEM, or fn's
 * negative return. */
int obj_snap_decode(obj_snap_dec *d,
                    const uint8_t *data,
                    size_t len,
                    unsigned fields,
                    uint32_t *format,
                    obj_snap_fn fn,
                    void *arg);

/* Blocks until the first upto bytes of a section are in, or no more will
 * come; returns how many are in (fewer than upto: the bytes stopped). */
typedef size_t (*obj_snap_wait)(void *arg, size_t upto);

/* obj_snap_decode of a section whose bytes are still arriving: before each
 * top-level field is read, wait(warg, ...) is asked for its bytes. Every
 * field is decoded (OBJ_SNAP_ALL), in one pass; a record of a kind before
 * the last one's (a group after an object, ...) stops the decode with
 * OBJ_SNAP_OUT_OF_ORDER before it is handed out, bytes that stopped coming
 * before the end with SMP_EPROTO. Otherwise as obj_snap_decode. */
#define OBJ_SNAP_OUT_OF_ORDER 1
int obj_snap_decode_fed(obj_snap_dec *d,
                        const uint8_t *data,
                        size_t len,
                        uint32_t *format,
                        obj_snap_wait wait,
                        void *warg,
                        obj_snap_fn fn,
                        void *arg);

/* What the top-level framing of a section says, without decoding a record. */
typedef struct obj_snap_frame {
    uint32_t format;    /* the last format field (0 when none) */
    size_t n[5];        /* records of segments, groups, objects, open puts,
                         * zones */
    int in_kind_order;  /* 1: every segment before every group, every group
                         * before every object, every object before every
                         * open put, every open put before every zone (as a
                         * save writes them): one decode with OBJ_SNAP_ALL
                         * hands them out in the order of five decodes of
                         * one field each */
} obj_snap_frame;

/* Walk the top-level fields of data[0..len) only, with obj_snap_decode's
 * rules (the same bytes there are refused the same way; a record's own
 * bytes are not read). SMP_OK or SMP_EPROTO. */
int obj_snap_frame_scan(const uint8_t *data, size_t len, obj_snap_frame *out);

/* obj_snap_frame_scan of the fields that lie whole in the first avail bytes
 * of data[0..len) (avail <= len), stopping before the first that does not;
 * *used gets the bytes of those fields. A sample of a section still
 * arriving. SMP_OK or SMP_EPROTO. */
int obj_snap_frame_scan_prefix(const uint8_t *data,
                               size_t len,
                               size_t avail,
                               obj_snap_frame *out,
                               size_t *used);

/* Free the scratch storage (d may then be reused from zero). */
void obj_snap_dec_fini(obj_snap_dec *d);

#endif /* OBJ_SNAP_DECODE_H */
