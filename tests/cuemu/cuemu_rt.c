/* The emulated CUDA runtime (tests/cuemu/cuemu_rt.h): host memory with a
 * table of live allocations, checked copies, counted syncs. */
#include "tests/cuemu/cuemu_rt.h"

#include "tests/cuemu/cuemu_api.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/check.h"
#include "base/clock.h"
#include "base/err.h"

typedef struct alloc_rec {
    uintptr_t base;
    size_t bytes;
} alloc_rec;

struct tri_cuemu_stream {
    int live;
};

struct tri_cuemu_event {
    int live;     /* 0 once destroyed (kept, so that a later use is reported) */
    int recorded; /* cudaEventRecord has run on it */
    double t;     /* the host clock then, seconds */
};

/* The emulated runtime's state: the process's one device (the test build
 * only; the product code keeps no state, docs/cuda.md). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static alloc_rec *recs;
static size_t n_recs, cap_recs;
/* the last FREED_KEEP frees, oldest overwritten first (pointer_kind) */
#define FREED_KEEP 4096
static alloc_rec freed[FREED_KEEP];
static size_t n_freed;
static tri_cuemu_rt_stats stats;
static int fail_mallocs;
static cudaError_t sync_fault = cudaSuccess;
static cudaError_t last_error = cudaSuccess;

/* records e as the last error (called without the lock held) */
static cudaError_t fail(cudaError_t e) {
    pthread_mutex_lock(&mu);
    last_error = e;
    pthread_mutex_unlock(&mu);
    return e;
}

_Noreturn void tri_cuemu_cuda_fail(cudaError_t err, const char *what, const char *file, int line) {
    tri_error("CUDA error at %s:%d (rank %d): %s: %s: %s", file, line, tri_cuda_world_rank(), what,
              tri_cuemu_rt_error_name(err), tri_cuemu_rt_error_string(err));
    abort();
}

const char *tri_cuemu_rt_error_name(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    }
    return "cudaErrorUnknown";
}

const char *tri_cuemu_rt_error_string(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulated: a range outside every live allocation?)";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    }
    return "unknown error";
}

cudaError_t tri_cuemu_rt_get_last_error(void) {
    pthread_mutex_lock(&mu);
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    pthread_mutex_unlock(&mu);
    return e;
}

static int stream_ok(cudaStream_t s) { return s == NULL || s->live == 1; }

/* The record holding [p, p + bytes), or -1 (locked). */
static long find(const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < n_recs; i++)
        if (a >= recs[i].base && a - recs[i].base <= recs[i].bytes && bytes <= recs[i].bytes - (a - recs[i].base))
            return (long)i;
    return -1;
}

cudaError_t tri_cuemu_rt_malloc_async(void **p, size_t bytes, cudaStream_t s) {
    if (p == NULL || !stream_ok(s)) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    cudaError_t e = cudaSuccess;
    if (fail_mallocs > 0) {
        fail_mallocs--;
        e = cudaErrorMemoryAllocation;
    } else {
        const size_t sz = (bytes + 255) / 256 * 256;
        void *q = aligned_alloc(256, sz ? sz : 256);
        if (q == NULL || (n_recs == cap_recs && (cap_recs = cap_recs ? 2 * cap_recs : 64,
                                                 recs = realloc(recs, cap_recs * sizeof *recs)) == NULL)) {
            free(q);
            e = cudaErrorMemoryAllocation;
        } else {
            memset(q, 0xff, sz ? sz : 256); /* NaN: memory the table forgets to zero shows */
            recs[n_recs++] = (alloc_rec){(uintptr_t)q, bytes};
            stats.live_bytes += bytes;
            stats.live_allocs++;
            *p = q;
        }
    }
    if (e != cudaSuccess) {
        *p = NULL;
        last_error = e;
    }
    pthread_mutex_unlock(&mu);
    return e;
}

cudaError_t tri_cuemu_rt_free_async(void *p, cudaStream_t s) {
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    if (p == NULL) return cudaSuccess;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n_recs; i++) {
        if (recs[i].base == (uintptr_t)p) {
            stats.live_bytes -= recs[i].bytes;
            stats.live_allocs--;
            freed[n_freed++ % FREED_KEEP] = recs[i];
            recs[i] = recs[--n_recs];
            pthread_mutex_unlock(&mu);
            free(p);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&mu);
    return fail(cudaErrorInvalidDevicePointer);
}

cudaError_t tri_cuemu_rt_memcpy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    if (bytes == 0) return cudaSuccess;
    if (dst == NULL || src == NULL) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    const int dst_dev = find(dst, bytes) >= 0, src_dev = find(src, bytes) >= 0;
    int ok = 0;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && !src_dev; break;
    case cudaMemcpyDeviceToHost: ok = src_dev && !dst_dev; break;
    case cudaMemcpyDeviceToDevice: ok = src_dev && dst_dev; break;
    default: ok = 0; /* the table always says which side is which */
    }
    if (ok) stats.copies++;
    if (ok && kind == cudaMemcpyDeviceToHost) stats.d2h_bytes += bytes;
    pthread_mutex_unlock(&mu);
    if (!ok) return fail(cudaErrorInvalidValue);
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_memset_async(void *p, int value, size_t bytes, cudaStream_t s) {
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    if (bytes == 0) return cudaSuccess;
    pthread_mutex_lock(&mu);
    const int ok = find(p, bytes) >= 0;
    pthread_mutex_unlock(&mu);
    if (!ok) return fail(cudaErrorInvalidValue);
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_stream_create(cudaStream_t *s, unsigned flags) {
    if (s == NULL) return fail(cudaErrorInvalidValue);
    *s = malloc(sizeof **s);
    if (*s == NULL) return fail(cudaErrorMemoryAllocation);
    (*s)->live = 1;
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_stream_destroy(cudaStream_t s) {
    if (s == NULL || s->live != 1) return fail(cudaErrorInvalidResourceHandle);
    s->live = 0; /* kept, not freed: a later use of the handle is reported, not a use after free */
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_stream_sync(cudaStream_t s) {
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    stats.syncs++;
    const cudaError_t fault = sync_fault;
    sync_fault = cudaSuccess;
    pthread_mutex_unlock(&mu);
    return fault == cudaSuccess ? cudaSuccess : fail(fault);
}

tri_cuemu_rt_ptr tri_cuemu_rt_pointer_kind(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    tri_cuemu_rt_ptr k = TRI_CUEMU_PTR_NONE;
    pthread_mutex_lock(&mu);
    if (find(p, 0) >= 0) {
        k = TRI_CUEMU_PTR_LIVE;
    } else {
        const size_t n = n_freed < FREED_KEEP ? n_freed : FREED_KEEP;
        for (size_t i = 0; i < n && k == TRI_CUEMU_PTR_NONE; i++)
            if (a >= freed[i].base && a - freed[i].base <= freed[i].bytes) k = TRI_CUEMU_PTR_FREED;
    }
    pthread_mutex_unlock(&mu);
    return k;
}

int tri_cuemu_rt_range_live(const void *p, size_t bytes) {
    pthread_mutex_lock(&mu);
    const int ok = find(p, bytes) >= 0;
    pthread_mutex_unlock(&mu);
    return ok;
}

void tri_cuemu_rt_stats_get(tri_cuemu_rt_stats *s) {
    pthread_mutex_lock(&mu);
    *s = stats;
    pthread_mutex_unlock(&mu);
}

void tri_cuemu_rt_fault_next_sync(cudaError_t e) {
    pthread_mutex_lock(&mu);
    sync_fault = e;
    pthread_mutex_unlock(&mu);
}

void tri_cuemu_rt_fail_next_mallocs(int n) {
    pthread_mutex_lock(&mu);
    fail_mallocs = n;
    pthread_mutex_unlock(&mu);
}

/* ---- events: the host clock at the record (every launch before it is done) ---- */

cudaError_t tri_cuemu_rt_event_create(cudaEvent_t *e) {
    if (e == NULL) return fail(cudaErrorInvalidValue);
    *e = calloc(1, sizeof **e);
    if (*e == NULL) return fail(cudaErrorMemoryAllocation);
    (*e)->live = 1;
    pthread_mutex_lock(&mu);
    stats.live_events++;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_event_destroy(cudaEvent_t e) {
    if (e == NULL || e->live != 1) return fail(cudaErrorInvalidResourceHandle);
    e->live = 0; /* kept, not freed, as streams are */
    pthread_mutex_lock(&mu);
    stats.live_events--;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_event_record(cudaEvent_t e, cudaStream_t s) {
    if (e == NULL || e->live != 1 || !stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    e->recorded = 1;
    e->t = tri_now_s();
    pthread_mutex_lock(&mu);
    stats.event_records++;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_event_sync(cudaEvent_t e) {
    if (e == NULL || e->live != 1 || !e->recorded) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    stats.event_syncs++;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == NULL) return fail(cudaErrorInvalidValue);
    if (start == NULL || end == NULL || start->live != 1 || end->live != 1 || !start->recorded || !end->recorded)
        return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(1e3 * (end->t - start->t));
    return cudaSuccess;
}

cudaError_t tri_cuemu_rt_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    if (flags != 0) return fail(cudaErrorInvalidValue);
    if (!stream_ok(s) || e == NULL || e->live != 1 || !e->recorded) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    stats.stream_waits++;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* ---- page-locked host memory: a table of its own ---- */

static alloc_rec *hrecs;
static size_t n_hrecs, cap_hrecs;

cudaError_t tri_cuemu_rt_host_alloc(void **p, size_t bytes, unsigned flags) {
    if (p == NULL || flags != 0) return fail(cudaErrorInvalidValue);
    const size_t sz = bytes ? bytes : 1;
    void *q = malloc(sz);
    pthread_mutex_lock(&mu);
    if (q != NULL && n_hrecs == cap_hrecs) {
        size_t cap = cap_hrecs ? 2 * cap_hrecs : 16;
        alloc_rec *r = realloc(hrecs, cap * sizeof *r);
        if (r == NULL) {
            free(q);
            q = NULL;
        } else {
            hrecs = r;
            cap_hrecs = cap;
        }
    }
    if (q != NULL) {
        memset(q, 0xff, sz); /* memory the op table forgets to zero shows */
        hrecs[n_hrecs++] = (alloc_rec){(uintptr_t)q, bytes};
        stats.live_host_bytes += bytes;
        stats.live_host_allocs++;
    }
    pthread_mutex_unlock(&mu);
    *p = q;
    return q != NULL ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t tri_cuemu_rt_free_host(void *p) {
    if (p == NULL) return cudaSuccess;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n_hrecs; i++) {
        if (hrecs[i].base == (uintptr_t)p) {
            stats.live_host_bytes -= hrecs[i].bytes;
            stats.live_host_allocs--;
            hrecs[i] = hrecs[--n_hrecs];
            pthread_mutex_unlock(&mu);
            free(p);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&mu);
    return fail(cudaErrorInvalidValue);
}
