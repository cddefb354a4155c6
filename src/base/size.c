#include "base/size.h"

#include <stdio.h>

bool tri_size_prod(size_t *out, int n, const size_t *factors) {
    size_t p = 1;
    for (int i = 0; i < n; i++)
        if (!tri_size_mul(&p, p, factors[i])) {
            *out = SIZE_MAX;
            return false;
        }
    *out = p;
    return true;
}

void tri_size_acc_add(tri_size_acc *acc, size_t a, size_t b) {
    size_t ab;
    if (!acc->ok) return;
    if (!tri_size_mul(&ab, a, b) || !tri_size_add(&acc->total, acc->total, ab)) {
        acc->total = SIZE_MAX;
        acc->ok = false;
    }
}

const char *tri_size_human(char *buf, size_t len, double bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 6) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.2f %s", bytes, units[u]);
    return buf;
}
