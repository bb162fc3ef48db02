/* utf8_offsets.h -- bad and good UTF-8 sequences placed at every offset of
 * an ASCII run, for the tests of the checks that share proto/utf8_valid.h
 * (test_obj_store through obj_validate_key, test_wm_identity through
 * wm_text_check). The check takes eight ASCII bytes at a time, so a
 * sequence must be judged alike across and at the end of each word. */
#ifndef UTF8_OFFSETS_H
#define UTF8_OFFSETS_H

#include <stdio.h>
#include <string.h>

/* Calls accepts(s, len) (s NUL-terminated) for each bad sequence (a lone
 * continuation byte, an overlong '/', a surrogate, above U+10FFFF, a cut
 * sequence, 0xFF, a lead byte without its continuation) and each good one
 * (two, three and four bytes, ASCII) after 0-17 and before 0-9 ASCII bytes.
 * Returns 0, or the first misjudged case described in why. */
static int utf8_judged_at_every_offset(int (*accepts)(const char *s, size_t len), char *why,
                                       size_t cap)
{
    static const char *const bad[] = {"\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                      "\xE2\x82", "\xFF", "\xC3\x28"};
    static const char *const good[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "~"};
    char buf[64];
    for (size_t pre = 0; pre <= 17; pre++) {
        for (size_t post = 0; post <= 9; post++) {
            for (int g = 0; g < 2; g++) {
                const char *const *set = g ? good : bad;
                size_t n = g ? sizeof(good) / sizeof(good[0]) : sizeof(bad) / sizeof(bad[0]);
                for (size_t i = 0; i < n; i++) {
                    size_t len = strlen(set[i]);
                    memset(buf, 'a', pre);
                    memcpy(buf + pre, set[i], len);
                    memset(buf + pre + len, 'b', post);
                    buf[pre + len + post] = '\0';
                    if (accepts(buf, pre + len + post) != g) {
                        snprintf(why, cap, "%s sequence %zu after %zu bytes, before %zu",
                                 g ? "good" : "bad", i, pre, post);
                        return -1;
                    }
                }
            }
        }
    }
    return 0;
}

#endif /* UTF8_OFFSETS_H */
