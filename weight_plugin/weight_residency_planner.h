/* weight_residency_planner.h -- side-effect-free residency decisions.
 *
 * The planner answers four questions from plain inputs and nothing else:
 * which complete affinity units a MIXED revision keeps HOT, what availability
 * and residency a revision really has given its members' replicas, which
 * AUTO revisions to demote first under memory pressure (and to which
 * residency), and how much of a migration plan one bounded round may
 * process. It reads
 * no global state, calls no host service and keeps nothing between calls, so
 * the same inputs give the same answer on every master. */
#ifndef WEIGHT_RESIDENCY_PLANNER_H
#define WEIGHT_RESIDENCY_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "weight_management.h"

/* ------------------------------------------------------------------------ */
/* MIXED selection                                                           */
/* ------------------------------------------------------------------------ */

/* Above this many units, or when the units' bytes need more than
 * WM_PLAN_DP_BUCKETS buckets at exact granularity, the search changes (see
 * wm_plan_mixed). */
#define WM_PLAN_DP_BUCKETS 4096
#define WM_PLAN_DP_MAX_UNITS 4096

typedef enum wm_plan_method {
    WM_PLAN_EXACT = 1,  /* dynamic programming over exact bytes: optimal */
    WM_PLAN_SCALED = 2, /* dynamic programming over bytes scaled to buckets */
    WM_PLAN_GREEDY = 3  /* largest units first, deterministic */
} wm_plan_method;

typedef struct wm_mixed_plan {
    uint64_t total_bytes;
    uint64_t target_bytes;      /* ratio * total, rounded to nearest */
    uint64_t hot_bytes;         /* bytes of the units chosen HOT */
    size_t hot_units;
    double observed_hot_ratio;  /* hot_bytes / total_bytes */
    wm_plan_method method;
} wm_mixed_plan;

/* Choose which complete units are HOT so that their bytes come as close as
 * possible to ratio * total_bytes, with at least one unit HOT and one COLD
 * (so the revision really is MIXED). unit_bytes[i] are the logical bytes of
 * unit i in summary order; their sum must equal total_bytes. hot_out[i] is
 * set to 1 for a HOT unit, 0 for a COLD one.
 *
 * Search: when the units' total fits WM_PLAN_DP_BUCKETS it is an exact
 * subset-sum DP (optimal). Otherwise, with at most WM_PLAN_DP_MAX_UNITS units,
 * bytes are scaled to about WM_PLAN_DP_BUCKETS buckets (each non-empty unit
 * weighs at least one) and the same DP runs on the scaled sizes; the result
 * is near-optimal (off by at most about n/2 buckets). With more units a
 * greedy pass takes units largest first (ties by order) whenever a unit
 * brings the sum closer to the target. Equal distances go to the smaller HOT
 * sum; equal sums to the choice made with the earlier units, so the answer is
 * deterministic. A unit larger than the target is chosen if that is closest.
 *
 * Returns WM_OK; WM_EPOLICY_UNSATISFIABLE when no split exists (fewer than
 * two units, or no bytes) -- *out and hot_out then describe the closest
 * whole choice (all HOT or all COLD); WM_EINVALID_ARGUMENT for a ratio
 * outside (0, 1), a NULL argument or a sum that differs from total_bytes;
 * SMP_ENOMEM. */
int wm_plan_mixed(const uint64_t *unit_bytes,
                  size_t n_units,
                  uint64_t total_bytes,
                  double ratio,
                  unsigned char *hot_out,  /* OUT: n_units flags */
                  wm_mixed_plan *out);     /* OUT */

/* Which units a residency keeps HOT: every unit for HOT, none for COLD,
 * wm_plan_mixed's choice at ratio for MIXED (the closest whole choice when
 * no split exists). unit_bytes[i] are the logical bytes of unit i, summing
 * to total_bytes. The answer a migration plans and a repair restores, so
 * both pick the same units for the same inputs. WM_OK,
 * WM_EINVALID_ARGUMENT (another residency, a MIXED ratio outside (0, 1), a
 * NULL argument), SMP_ENOMEM. */
int wm_plan_unit_goals(const uint64_t *unit_bytes,
                       size_t n_units,
                       uint64_t total_bytes,
                       wm_residency target,
                       double ratio,
                       unsigned char *hot_out); /* OUT: n_units flags */

/* ------------------------------------------------------------------------ */
/* Observed state                                                            */
/* ------------------------------------------------------------------------ */

/* What the host reports for one member of a revision. */
typedef struct wm_member_replicas {
    unsigned char memory; /* a readable memory replica exists */
    unsigned char cold;   /* a readable, verified cold replica exists */
} wm_member_replicas;

typedef struct wm_observation {
    wm_availability availability; /* READY or DEGRADED */
    wm_residency residency;       /* HOT, COLD, MIXED or ABSENT */
    double observed_hot_ratio;
    uint64_t hot_bytes;           /* bytes of units wholly in memory */
    uint64_t unreadable_members;  /* members with no readable replica */
} wm_observation;

/* Derive a published revision's availability and residency from what its
 * replicas really are (after a round, or from node inventories after a
 * failover). members[] holds one entry per member of aff, in unit order and
 * member order within a unit. The revision is READY when the manifest and
 * every member are readable, DEGRADED otherwise. A unit counts HOT only when
 * every member has a memory replica (a unit in the middle of a move is not
 * HOT); the ratio is HOT unit bytes over all bytes; residency is HOT at
 * ratio 1 (or every unit HOT), COLD at 0, MIXED in between, and ABSENT when
 * no member is readable at all. The result always passes the combination
 * invariants. WM_OK, or WM_EINVALID_ARGUMENT when aff has no unit, a unit has
 * no member, or n_members is not the summary's member count. */
int wm_residency_observe(const wm_affinity *aff,
                         const wm_member_replicas *members,
                         size_t n_members,
                         int manifest_readable,
                         wm_observation *out); /* OUT */

/* ------------------------------------------------------------------------ */
/* AUTO demotion order                                                       */
/* ------------------------------------------------------------------------ */

typedef struct wm_auto_candidate {
    const wm_identity *id;          /* borrowed */
    uint64_t last_access_ms;
    uint64_t releasable_hot_bytes;  /* memory the next step would free */
    wm_availability availability;
    wm_migration_mode mode;
    wm_residency residency;         /* observed */
    uint64_t operation_id;          /* 0 = none */
    uint32_t lease_count;
} wm_auto_candidate;

/* The next colder residency on the AUTO path HOT -> MIXED -> COLD, or
 * WM_RES_UNKNOWN when there is none (COLD or not a payload residency). */
wm_residency wm_auto_next_demotion(wm_residency observed);

/* The residency an accessed AUTO revision converges back to: preferred when
 * it is hotter than observed (COLD < MIXED < HOT), else WM_RES_UNKNOWN. */
wm_residency wm_auto_promotion_target(wm_residency observed, wm_residency preferred);

/* Filter and order demotion candidates. Eligible: READY, AUTO, no active
 * operation, no lease, and a colder step exists. Order: last access oldest
 * first, then most releasable HOT bytes first, then identity ascending (then
 * input position, so the order is total). Writes the indices of eligible
 * candidates into order_out (capacity n) and their number into *n_out.
 * WM_OK, WM_EINVALID_ARGUMENT (NULL, or a candidate without identity),
 * SMP_ENOMEM. */
int wm_auto_order(const wm_auto_candidate *c,
                  size_t n,
                  size_t *order_out, /* OUT: up to n indices */
                  size_t *n_out);    /* OUT */

/* ------------------------------------------------------------------------ */
/* Round bounding                                                            */
/* ------------------------------------------------------------------------ */

/* One member of a migration or deletion plan. Members of one affinity unit
 * are adjacent in the plan; a change of `unit` starts the next unit. */
typedef struct wm_batch_member {
    uint32_t unit;
    uint64_t bytes;
} wm_batch_member;

typedef struct wm_batch {
    size_t members;  /* length of the prefix to process this round */
    size_t units;
    uint64_t bytes;
} wm_batch;

/* The prefix of members[0..n) one round processes: whole units while both
 * max_members and max_bytes hold; the first unit always, even when it alone
 * exceeds either limit (progress, never a split unit). n == 0 gives an empty
 * batch. WM_OK, or WM_EINVALID_ARGUMENT for NULL or a zero limit. */
int wm_batch_bound(const wm_batch_member *members,
                   size_t n,
                   uint64_t max_members,
                   uint64_t max_bytes,
                   wm_batch *out); /* OUT */

#endif /* WEIGHT_RESIDENCY_PLANNER_H */
