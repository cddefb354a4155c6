/* Checked size arithmetic: every byte or element count that comes from user
 * input (model shapes, batch sizes, ids in a file) is computed with these
 * before anything is allocated or laid out, so an absurd shape is refused
 * with its numbers instead of wrapping around. */
#ifndef TRI_BASE_SIZE_H
#define TRI_BASE_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = a * b; false (and *out = SIZE_MAX) on overflow. */
static inline bool tri_size_mul(size_t *out, size_t a, size_t b) {
    if (__builtin_mul_overflow(a, b, out)) {
        *out = SIZE_MAX;
        return false;
    }
    return true;
}

/* *out = a + b; false (and *out = SIZE_MAX) on overflow. */
static inline bool tri_size_add(size_t *out, size_t a, size_t b) {
    if (__builtin_add_overflow(a, b, out)) {
        *out = SIZE_MAX;
        return false;
    }
    return true;
}

/* Product of n factors; false on overflow (*out = SIZE_MAX). */
bool tri_size_prod(size_t *out, int n, const size_t *factors);

/* A saturating accumulator: once a step overflows, total stays SIZE_MAX and
 * ok is false, so a long layout computation checks once at the end. */
typedef struct tri_size_acc {
    size_t total;
    bool ok;
} tri_size_acc;

#define TRI_SIZE_ACC_INIT \
    { 0, true }

/* acc += a * b (saturating). */
void tri_size_acc_add(tri_size_acc *acc, size_t a, size_t b);

/* "1.50 GiB", "12.0 MiB", "512 B" into buf; returns buf. */
const char *tri_size_human(char *buf, size_t len, double bytes);

#endif
