/* Monotonic wall time in seconds, for durations. */
#ifndef TRI_CLOCK_H
#define TRI_CLOCK_H

#include <time.h>

static inline double tri_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
