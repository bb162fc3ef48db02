/* host_uthash.h -- uthash, hashing keys with XXH3 instead of its default
 * Jenkins hash.
 *
 * The master's tables hold up to millions of keys and are probed several
 * times per request on the loop thread; XXH3 is faster to compute and
 * spreads keys that share long prefixes ("weights/<tenant>/...") at least
 * as well. Every host file that uses uthash includes this header instead of
 * <uthash.h>, so one table is never hashed two ways. */
#ifndef HOST_UTHASH_H
#define HOST_UTHASH_H

#include <xxhash.h>

#define HASH_FUNCTION(keyptr, keylen, hashv) \
    ((hashv) = (unsigned)XXH3_64bits((keyptr), (size_t)(keylen)))

#include <uthash.h>

#endif /* HOST_UTHASH_H */
