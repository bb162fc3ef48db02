/* weight_check.h -- CHECK(s, call) for tests of libweightclient: a call
 * that must return 0 fails the cmocka test otherwise, naming the call, the
 * error and the store's last message. Include after <cmocka.h> and
 * "weightclient.h". */
#ifndef TEST_WEIGHT_CHECK_H
#define TEST_WEIGHT_CHECK_H

#define CHECK(s, call)                                                                       \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != 0)                                                                        \
            fail_msg("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, weight_error_name(rc_), \
                     weight_store_last_error(s));                                            \
    } while (0)

#endif
