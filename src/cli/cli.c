#include "cli/cli.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int tri_arg_int(const char *opt, const char *val, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || !*val || *end || errno || v < min || v > max) {
        tri_error("%s: expected an integer in [%ld, %ld], got '%s'", opt, min, max, val ? val : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int tri_arg_double(const char *opt, const char *val, double min, double max, double *out) {
    char *end = NULL;
    errno = 0;
    double v = val ? strtod(val, &end) : 0;
    if (!val || !*val || *end || errno || !(v >= min && v <= max)) {
        tri_error("%s: expected a number in [%g, %g], got '%s'", opt, min, max, val ? val : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int tri_arg_u64(const char *opt, const char *val, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = val ? strtoull(val, &end, 10) : 0;
    if (!val || !*val || *end || errno || val[0] == '-') {
        tri_error("%s: expected a non-negative integer, got '%s'", opt, val ? val : "(nothing)");
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}
