/* Small JSON helpers (base/json.h). */
#include "base/json.h"

#include <stdlib.h>
#include <string.h>

const char *tri_json_kind(const cJSON *item) {
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsTrue(item)) return "true";
    if (cJSON_IsFalse(item)) return "false";
    if (cJSON_IsNull(item)) return "null";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "an unknown value";
}

int tri_json_uint(const cJSON *item, uint64_t *v) {
    if (!cJSON_IsNumber(item)) return -1;
    double d = item->valuedouble;
    if (!(d >= 0.0) || d >= 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *v = (uint64_t)d;
    return 0;
}

/* Writes the literal of s to f, or into out (when f is NULL; out NULL:
 * only counts); returns its length. */
static size_t quote(FILE *f, char *out, const char *s) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
#define PUT(c)                      \
    do {                            \
        if (f)                      \
            fputc((c), f);          \
        else if (out)               \
            out[n] = (char)(c);     \
        n++;                        \
    } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            PUT('\\');
            PUT(*p);
        } else if (*p < 0x20) {
            PUT('\\');
            PUT('u');
            PUT('0');
            PUT('0');
            PUT(hex[*p >> 4]);
            PUT(hex[*p & 15]);
        } else {
            PUT(*p);
        }
    }
    PUT('"');
#undef PUT
    return n;
}

char *tri_json_quote(const char *s) {
    size_t n = quote(NULL, NULL, s);
    char *out = malloc(n + 1);
    if (out == NULL) return NULL;
    quote(NULL, out, s);
    out[n] = '\0';
    return out;
}

void tri_json_fputs(FILE *f, const char *s) { quote(f, NULL, s); }
