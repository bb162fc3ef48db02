/* weightctl_repair.c -- `weightctl repair ID [--expect GEN]`: start a
 * REPAIRING operation that restores the replicas the revision's residency
 * needs. The C call is strictly fenced (weight_repair refuses generation 0),
 * so without --expect the command reads the revision's current metadata
 * generation first and says which one it used (on stderr, so --json output
 * stays one object); with --expect it fences on the caller's. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "weightctl.h"

int wctl_cmd_repair(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {{"expect", required_argument, NULL, 'e'}, {NULL, 0, NULL, 0}};
    uint64_t expect = 0;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c != 'e') return wctl_opt_error("repair", c, argv);
        if (wctl_parse_u64(optarg, &expect) < 0 || expect == 0)
            return wctl_bad_value("repair", "--expect", optarg, "a metadata generation");
    }
    if (optind != argc - 1) return wctl_bad_usage("repair", "takes one ID");
    weight_identity id;
    weight_operation op;
    if (wctl_open_weights(x) < 0) return 1;
    if ((rc = wctl_parse_id(x, argv[optind], &id)) != 0) return rc;
    if ((rc = wctl_fence(x, "repair", &id, &expect)) != 0) return rc;
    if ((rc = weight_repair(x->ws, &id, expect, &op)) < 0) return wctl_failed(x, "repair", rc);
    return wctl_show_operation(x, &op);
}
