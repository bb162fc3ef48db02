/* utf8_valid.h -- the strict UTF-8 check the host's object store (keys,
 * groups, tenants, nodes, paths) and the weight plugin (identities, keys,
 * request ids) both apply to strings they decode. Header-only, as pb_wire.h
 * is, so the master and the plugin keep no symbol between them (the plugin
 * never links against the host); each had its own copy before. */
#ifndef UTF8_VALID_H
#define UTF8_VALID_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 1 when s[0..len) is well-formed UTF-8 (RFC 3629: shortest form only, no
 * UTF-16 surrogates, at most U+10FFFF), else 0. Eight ASCII bytes are taken
 * at once (every key and identity of a snapshot load is ASCII); each would
 * pass the byte loop on its own. */
static inline int utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint64_t w;
        if (len - i >= sizeof(w)) {
            memcpy(&w, s + i, sizeof(w));
            if ((w & UINT64_C(0x8080808080808080)) == 0) {
                i += sizeof(w);
                continue;
            }
        }
        unsigned c = s[i];
        size_t need;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (len - i - 1 < need) return 0;
        for (size_t k = 1; k <= need; k++) {
            unsigned cc = s[i + k];
            if ((cc & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
        if (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
        i += need + 1;
    }
    return 1;
}

#endif /* UTF8_VALID_H */
