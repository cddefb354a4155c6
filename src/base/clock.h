/* The one clock of every layer: monotonic seconds for durations, and
 * wall-clock seconds since the epoch for what is written down (a rank's
 * status file, a checkpoint's time). */
#ifndef TRI_CLOCK_H
#define TRI_CLOCK_H

#include <time.h>

/* Monotonic time in seconds (CLOCK_MONOTONIC): for durations and deadlines. */
static inline double tri_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall-clock time in seconds since the epoch (CLOCK_REALTIME): for
 * timestamps that other processes or people read, never for durations. */
static inline double tri_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
