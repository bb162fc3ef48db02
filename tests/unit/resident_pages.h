/* resident_pages.h -- how much of an anonymous mapping is resident, read
 * back with mincore(), for the unit programs of the memory a load fills
 * (test_host_bulk, test_obj_slab): a page is resident once it has been
 * mapped (populated or touched), and not before. Header-only (static
 * functions); include after cmocka.h. */
#ifndef RESIDENT_PAGES_H
#define RESIDENT_PAGES_H

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The bytes of a page. */
static inline size_t page_bytes(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* The pages [off, off + len) spans, off a page boundary. */
static inline size_t pages_of(size_t len)
{
    return (len + page_bytes() - 1) / page_bytes();
}

/* How many of the pages of [off, off + len) of base are resident (base +
 * off a page boundary; the range mapped). */
static inline size_t resident_pages(const void *base, size_t off, size_t len)
{
    size_t n = pages_of(len);
    if (n == 0) return 0;
    unsigned char *vec = calloc(n, 1);
    assert_non_null(vec);
    assert_int_equal(mincore((char *)base + off, len, vec), 0);
    size_t in = 0;
    for (size_t i = 0; i < n; i++) in += vec[i] & 1;
    free(vec);
    return in;
}

#endif /* RESIDENT_PAGES_H */
