/* weight_management.h -- the weight plugin's contracts.
 *
 * The identifiers every part of weight_mgmt.so shares: its OpLog record types
 * and their capability gates, its snapshot section, and the RFC's error codes.
 * Identity, policy, revision metadata, leases and operations join this header
 * as the revision lifecycle is built; nothing here depends on the host beyond
 * the ABI header. */
#ifndef WEIGHT_MANAGEMENT_H
#define WEIGHT_MANAGEMENT_H

#include "store_plugin.h"

/* OpLog record types of the plugin (DESIGN.md section 4). */
enum {
    WM_OP_METADATA_UPSERT = 8,
    WM_OP_METADATA_DELETE = 9,
    WM_OP_LEASE_UPSERT = 10,
    WM_OP_LEASE_DELETE = 11,
    WM_OP_LINEAGE_CLAIM = 12
};

/* Encoding versions this build writes and can replay. */
#define WM_RECORD_ENCVER 1

/* The gates of the RFC's "HA and Upgrade" section: types 8-11 need the first,
 * type 12 (generation replacement) the second, before the active master may
 * append them in HA mode. */
#define WM_GATE_MANAGEMENT "weight_management_oplog_capability_confirmed"
#define WM_GATE_LINEAGE "weight_lineage_oplog_capability_confirmed"

/* The plugin's snapshot section and its encoding version. */
#define WM_SECTION_NAME "weight_metadata"
#define WM_SECTION_ENCVER 1

/* The RFC's error codes, as negative numbers below the host's SMP_E* range so
 * both can travel in one status field. */
typedef enum wm_error {
    WM_OK = 0,
    WM_EINVALID_ARGUMENT = -101,
    WM_ENOT_FOUND = -102,
    WM_ENOT_READY = -103,
    WM_ECONFLICT = -104,
    WM_ESTALE_GENERATION = -105,
    WM_EBUSY = -106,
    WM_ELEASE_EXPIRED = -107,
    WM_EDURABILITY_FAILED = -108,
    WM_EPOLICY_UNSATISFIABLE = -109
} wm_error;

/* The RFC's name of an error ("STALE_GENERATION"); SMP_E* names otherwise. */
const char *wm_error_name(int rc);

#endif /* WEIGHT_MANAGEMENT_H */
