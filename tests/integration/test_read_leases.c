/* test_read_leases.c -- a removal after a read does not wait for the read
 * leases the read took, on a real master with the real weight_mgmt.so and
 * its embedded node.
 *
 * A replica lookup leases its object for 10 s against removal. Pinned
 * here, with what the master counted (its metrics and log), never the
 * clock: weight_get gives its leases back when it ends, so the removal that
 * follows is never refused (no retry, no wait); a reader still holding a
 * lease holds back that member of a deletion, which completes once the
 * reader gives it back (one wait, no retry); another connection's release
 * is refused naming the key and changes nothing; a reader that dies with
 * its leases ends them when its connection closes; a reader that never
 * gives back (an older client) holds the member until the lease expires,
 * and the deletion then completes without a retry; a migration to COLD
 * keeps the memory of a member being read until the reader gives it back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

#define WAIT_MS 30000 /* generous: the machine is shared */

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

#define PAYLOAD0 "weights/acme/llm/x/v1/1/payload/0"
#define PAYLOAD1 "weights/acme/llm/x/v1/1/payload/1"
#define RELEASED "store_read_leases_ended_total{how=\"released\"}"
#define CLOSED "store_read_leases_ended_total{how=\"connection_closed\"}"

typedef wx_published fixture;

/* A master ticking every 50 ms with revision llm/x/v1@1 of tenant acme
 * published HOT (two payload objects and the manifest). */
static int setup(void **state)
{
    *state = wx_published_new("rlease", NULL, "      tick_period_ms: 50\n", model, N_MODEL, 11);
    return *state != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    wx_published_free(*state);
    return 0;
}

static void sleep_ms(long ms)
{
    usleep((useconds_t)ms * 1000);
}

/* Ask for the removal of f->id: accepted, DELETING. */
static void start_removal(fixture *f)
{
    weight_metadata md;
    CHECK(f->s, weight_get_metadata(f->s, &f->id, &md, NULL));
    CHECK(f->s, weight_remove(f->s, &f->id, md.metadata_generation, &md));
    assert_int_equal(md.availability, WEIGHT_DELETING);
}

/* 1 once f->id's deletion ended (DELETED, no operation). */
static int deleted(fixture *f)
{
    weight_metadata md;
    int rc = weight_get_metadata(f->s, &f->id, &md, NULL);
    return rc != 0 || (md.availability == WEIGHT_DELETED && md.operation_id == 0);
}

static void wait_deleted(fixture *f, int wait_ms)
{
    for (int i = 0; i * 20 < wait_ms; i++) {
        if (deleted(f)) return;
        sleep_ms(20);
    }
    fail_msg("the deletion of llm/x/v1@1 did not end in %d ms", wait_ms);
}

/* Wait until the deletion held a member back for a read lease. */
static void wait_lease_wait(fixture *f)
{
    for (int i = 0; wx_metric(&f->m, "weight_deletion_read_lease_waits_total") < 1; i++) {
        if (i * 20 > WAIT_MS) fail_msg("the deletion never waited for the read lease");
        sleep_ms(20);
    }
}

static int exists(kvc *c, const char *key)
{
    int e = 0;
    assert_int_equal(kvc_exists(c, key, &e), 0);
    return e;
}

/* -- tests ----------------------------------------------------------------------- */

/* weight_get then weight_remove: the get gave back every read lease it
 * took (the manifest's two lookups and one per payload), so the deletion
 * is never refused by the host, never retried and never waits. */
static void test_get_then_remove_does_not_wait_for_read_leases(void **state)
{
    fixture *f = *state;
    wx_get_and_compare(f->s, &f->id, model, N_MODEL);
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 0);
    assert_int_equal(wx_metric(&f->m, RELEASED), 4);
    start_removal(f);
    wait_deleted(f, WAIT_MS);
    assert_int_equal(wx_metric(&f->m, "weight_operation_retries_total"), 0);
    assert_int_equal(wx_metric(&f->m, "weight_operation_failures_total"), 0);
    assert_int_equal(wx_metric(&f->m, "weight_deletion_read_lease_waits_total"), 0);
    assert_false(hx_log_contains(&f->m, "SMP_EBUSY"));
}

/* A reader that looked payload 0 up and has not finished holds it: the
 * deletion removes the rest and waits for that one, which stays readable;
 * once the reader gives its lease back the deletion completes, with no
 * retry and no refusal from the host. */
static void test_read_in_progress_holds_the_member_until_it_ends(void **state)
{
    fixture *f = *state;
    kvc *reader = hx_client(&f->m);
    kvc_object obj;
    uint32_t released = 0;
    assert_non_null(reader);
    kvc_track_read_leases(reader, 1);
    assert_int_equal(kvc_get(reader, PAYLOAD0, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(reader), 1);
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 1);

    start_removal(f);
    wait_lease_wait(f);
    for (int i = 0; exists(reader, PAYLOAD1); i++) { /* the unleased member goes meanwhile */
        if (i * 20 > WAIT_MS) fail_msg("%s was not removed beside the leased one", PAYLOAD1);
        sleep_ms(20);
    }
    assert_false(deleted(f));
    assert_true(exists(reader, PAYLOAD0));

    assert_int_equal(kvc_release_read_leases(reader, &released), 0);
    assert_int_equal(released, 1);
    assert_int_equal(kvc_read_leases_noted(reader), 0);
    wait_deleted(f, WAIT_MS);
    assert_false(exists(reader, PAYLOAD0));
    assert_int_equal(wx_metric(&f->m, "weight_operation_retries_total"), 0);
    assert_false(hx_log_contains(&f->m, "SMP_EBUSY"));
    kvc_close(reader);
}

/* 1 when key has a memory replica, looked up on a connection of its own
 * (closed at once: its read lease ends with it). A lookup while a change
 * of the key's replicas is being made durable is SMP_EBUSY: asked again. */
static int in_memory(fixture *f, const char *key)
{
    kvc *probe = hx_client(&f->m);
    kvc_object obj;
    int memory = 0, rc;
    assert_non_null(probe);
    for (int i = 0; (rc = kvc_get(probe, key, &obj)) == SMP_EBUSY && i * 10 < WAIT_MS; i++) sleep_ms(10);
    assert_int_equal(rc, 0);
    for (size_t i = 0; i < obj.n_replicas; i++)
        if (obj.replicas[i].kind == SMP_REPLICA_MEMORY) memory = 1;
    kvc_close(probe);
    return memory;
}

/* A reader that looked payload 0 up keeps its memory replica through a
 * migration to COLD: payload 1's memory goes, payload 0's release is put
 * off while the lease lasts (counted, never asked of the host, which
 * refuses it), and once the reader gives the lease back a later pass
 * releases it and the migration completes, with no retry. */
static void test_read_in_progress_keeps_memory_through_a_migration(void **state)
{
    fixture *f = *state;
    kvc *reader = hx_client(&f->m);
    kvc_object obj;
    weight_metadata md;
    weight_operation op;
    uint32_t released = 0;
    assert_non_null(reader);
    kvc_track_read_leases(reader, 1);
    assert_int_equal(kvc_get(reader, PAYLOAD0, &obj), 0);
    assert_true(in_memory(f, PAYLOAD0) && in_memory(f, PAYLOAD1));

    CHECK(f->s, weight_get_metadata(f->s, &f->id, &md, NULL));
    CHECK(f->s, weight_migrate(f->s, &f->id, WEIGHT_RES_COLD, 0.0, md.metadata_generation, &op));
    for (int i = 0; in_memory(f, PAYLOAD1); i++) {
        if (i * 20 > WAIT_MS) fail_msg("the migration did not release the memory of %s", PAYLOAD1);
        sleep_ms(20);
    }
    sleep_ms(300); /* three more passes of the job's 100 ms wait */
    assert_true(in_memory(f, PAYLOAD0));
    assert_true(wx_metric(&f->m, "weight_migration_read_lease_waits_total") >= 1);
    CHECK(f->s, weight_get_metadata(f->s, &f->id, &md, NULL));
    assert_int_equal(md.operation_id, op.id);

    assert_int_equal(kvc_release_read_leases(reader, &released), 0);
    assert_int_equal(released, 1);
    for (int i = 0;; i++) {
        CHECK(f->s, weight_get_metadata(f->s, &f->id, &md, NULL));
        if (md.operation_id == 0) break;
        if (i * 20 > WAIT_MS) fail_msg("the migration did not end once the lease was given back");
        sleep_ms(20);
    }
    assert_int_equal(md.availability, WEIGHT_READY);
    assert_int_equal(md.residency, WEIGHT_RES_COLD);
    assert_false(in_memory(f, PAYLOAD0));
    assert_int_equal(wx_metric(&f->m, "weight_operation_retries_total"), 0);
    assert_int_equal(wx_metric(&f->m, "weight_operation_failures_total"), 0);
    assert_false(hx_log_contains(&f->m, "SMP_EBUSY"));
    wx_get_and_compare(f->s, &f->id, model, N_MODEL);
    kvc_close(reader);
}

/* Another connection of the same caller cannot end a reader's lease: its
 * release is refused naming the key, the lease stays (a plain removal of
 * the object is still refused), and the refusal is counted; the reader's
 * own release then frees the object. */
static void test_release_by_another_connection_is_refused(void **state)
{
    fixture *f = *state;
    kvc *reader = hx_client(&f->m), *other = hx_client(&f->m);
    const char *key = "acme/notes.txt";
    const char *keys[2] = {key, key};
    kvc_object obj;
    uint32_t released = 9, not_held = 9;
    assert_non_null(reader);
    assert_non_null(other);
    assert_int_equal(kvc_put_bytes(reader, key, "hello", 5, SMP_DATA_KV, "", 0, NULL), 0);
    assert_int_equal(kvc_get(reader, key, &obj), 0);

    assert_int_equal(kvc_release_keys(other, keys, 1, &released, &not_held), SMP_ENOTFOUND);
    assert_true(hx_says(kvc_error(other), "this connection holds no read lease on 'acme/notes.txt'"));
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 1);
    assert_int_equal(wx_metric(&f->m, "store_read_lease_release_refusals_total"), 1);
    assert_int_equal(wx_metric(&f->m, RELEASED), 0);
    assert_int_equal(kvc_remove(other, key), SMP_EBUSY);

    /* one lookup, one lease: the key listed twice gives back one */
    assert_int_equal(kvc_release_keys(reader, keys, 2, &released, &not_held), 0);
    assert_int_equal(released, 1);
    assert_int_equal(not_held, 1);
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 0);
    assert_int_equal(kvc_remove(other, key), 0);
    kvc_close(reader);
    kvc_close(other);
}

/* A reader whose master restarts between its lookup and its release: the
 * connection moves to the new master, where that lookup's lease never
 * was (it ended with the old master). The release sends nothing -- the
 * new master counts no refusal and no release -- and the lookup noted
 * before the move is forgotten. */
static void test_leases_of_a_lost_connection_are_not_sent_after_it_moves(void **state)
{
    fixture *f = *state;
    kvc *reader = hx_client(&f->m);
    kvc_object obj;
    uint32_t released = 9;
    int exists = 0;
    assert_non_null(reader);
    kvc_track_read_leases(reader, 1);
    assert_int_equal(kvc_get(reader, PAYLOAD0, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(reader), 1);
    hx_kill(&f->m);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    assert_int_equal(kvc_exists(reader, PAYLOAD0, &exists), 0); /* sent again: the move */
    assert_int_equal(exists, 1);
    assert_int_equal(kvc_read_leases_noted(reader), 0);
    assert_int_equal(kvc_release_read_leases(reader, &released), 0);
    assert_int_equal(released, 0);
    assert_int_equal(wx_metric(&f->m, "store_read_lease_release_refusals_total"), 0);
    assert_int_equal(wx_metric(&f->m, RELEASED), 0);
    /* a lookup on the new connection is noted and given back as ever */
    assert_int_equal(kvc_get(reader, PAYLOAD0, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(reader), 1);
    assert_int_equal(kvc_release_read_leases(reader, &released), 0);
    assert_int_equal(released, 1);
    assert_int_equal(wx_metric(&f->m, RELEASED), 1);
    kvc_close(reader);
}

/* A reader process killed in the middle of its read (both payloads looked
 * up, nothing given back): its connection closes and its leases end with
 * it, and the deletion that waited for them completes without a retry. */
static void test_reader_that_dies_ends_its_leases_with_its_connection(void **state)
{
    fixture *f = *state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        kvc *c = hx_client(&f->m);
        kvc_object obj;
        char ok = c != NULL && kvc_get(c, PAYLOAD0, &obj) == 0 && kvc_get(c, PAYLOAD1, &obj) == 0;
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        for (;;) pause(); /* reading, until killed */
    }
    close(ready[1]);
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    assert_true(ok);
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 2);

    start_removal(f);
    wait_lease_wait(f);
    assert_false(deleted(f));
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    wait_deleted(f, WAIT_MS);
    assert_int_equal(wx_metric(&f->m, CLOSED), 2);
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 0);
    assert_int_equal(wx_metric(&f->m, "weight_operation_retries_total"), 0);
    assert_false(hx_log_contains(&f->m, "SMP_EBUSY"));
}

/* A reader that never gives its lease back (a client older than releases)
 * and stays connected: the member is held until the lease expires (10 s),
 * then removed; nothing was released or ended by a close, and the
 * deletion was never refused nor retried. */
static void test_lease_never_given_back_ends_at_its_expiry(void **state)
{
    fixture *f = *state;
    kvc *reader = hx_client(&f->m); /* tracking off: releases nothing */
    kvc_object obj;
    assert_non_null(reader);
    assert_int_equal(kvc_get(reader, PAYLOAD0, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(reader), 0);
    start_removal(f);
    wait_lease_wait(f);
    wait_deleted(f, 10000 + WAIT_MS);
    assert_int_equal(wx_metric(&f->m, RELEASED), 0);
    assert_int_equal(wx_metric(&f->m, CLOSED), 0);
    assert_int_equal(wx_metric(&f->m, "store_read_leases"), 0);
    assert_int_equal(wx_metric(&f->m, "weight_operation_retries_total"), 0);
    assert_false(hx_log_contains(&f->m, "SMP_EBUSY"));
    kvc_close(reader);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_then_remove_does_not_wait_for_read_leases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_in_progress_holds_the_member_until_it_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_in_progress_keeps_memory_through_a_migration, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_release_by_another_connection_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_that_dies_ends_its_leases_with_its_connection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lease_never_given_back_ends_at_its_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leases_of_a_lost_connection_are_not_sent_after_it_moves,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
