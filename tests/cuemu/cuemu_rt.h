/* The few CUDA runtime calls the CUDA op table (kernels/cuda/cuda_ops.c)
 * makes, emulated on the host for its emulated copy ("cuda-emu", compiled
 * with TRI_CUEMU): device memory is host memory, streams are handles that are
 * checked and otherwise ignored (every launch and copy is synchronous).
 *
 * It is stricter than it needs to be, so that the op table's mistakes show:
 *   - memory from cudaMallocAsync is filled with 0xff bytes (NaN as float), so
 *     an allocation the table forgets to zero shows;
 *   - every copy and memset must lie inside one live allocation on its device
 *     side(s), and cudaMemcpyAsync's kind must say which side is which:
 *     otherwise cudaErrorInvalidValue, which TRI_CUDA_CHECK reports;
 *   - cudaFreeAsync of a pointer that is not the start of a live allocation,
 *     or a stream that was never created (or was destroyed), is an error too.
 * Kernel launches check their pointer arguments against the live
 * allocations (tri_cuemu_rt_pointer_kind, cuemu_api.h): a test hands kernels device
 * memory from cudaMallocAsync (host memory here, which the test may read
 * and write directly), never plain host memory.
 * cudaHostAlloc gives host memory from a table of its own, and
 * cudaStreamWaitEvent checks its handles (the copies are synchronous anyway).
 * Events (the profile's timing marks) take the host clock when recorded:
 * every launch before them has finished by then. Recording on a stream that
 * is not live, reading an event never recorded, or using one destroyed is
 * cudaErrorInvalidResourceHandle.
 * The names are macros onto tri_cuemu_rt_*, so that a program can link the
 * real CUDA runtime beside it. C and C++. */
#ifndef TRI_CUEMU_RT_H
#define TRI_CUEMU_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tri_cuemu_error {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalAddress = 700 /* only as a planted fault (tri_cuemu_rt_fault_next_sync) */
} cudaError_t;

typedef enum tri_cuemu_memcpy_kind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef struct tri_cuemu_stream *cudaStream_t;
typedef struct tri_cuemu_event *cudaEvent_t;
#define cudaStreamNonBlocking     0x01
#define cudaHostAllocDefault      0x00

#define cudaMallocAsync           tri_cuemu_rt_malloc_async
#define cudaFreeAsync             tri_cuemu_rt_free_async
#define cudaMemcpyAsync           tri_cuemu_rt_memcpy_async
#define cudaMemsetAsync           tri_cuemu_rt_memset_async
#define cudaStreamCreateWithFlags tri_cuemu_rt_stream_create
#define cudaStreamDestroy         tri_cuemu_rt_stream_destroy
#define cudaStreamSynchronize     tri_cuemu_rt_stream_sync
#define cudaGetLastError          tri_cuemu_rt_get_last_error
#define cudaGetErrorName          tri_cuemu_rt_error_name
#define cudaGetErrorString        tri_cuemu_rt_error_string
#define cudaEventCreate           tri_cuemu_rt_event_create
#define cudaEventDestroy          tri_cuemu_rt_event_destroy
#define cudaEventRecord           tri_cuemu_rt_event_record
#define cudaEventSynchronize      tri_cuemu_rt_event_sync
#define cudaEventElapsedTime      tri_cuemu_rt_event_elapsed
#define cudaStreamWaitEvent       tri_cuemu_rt_stream_wait_event
#define cudaHostAlloc             tri_cuemu_rt_host_alloc
#define cudaFreeHost              tri_cuemu_rt_free_host

cudaError_t tri_cuemu_rt_malloc_async(void **p, size_t bytes, cudaStream_t s);
cudaError_t tri_cuemu_rt_free_async(void *p, cudaStream_t s);
cudaError_t tri_cuemu_rt_memcpy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t tri_cuemu_rt_memset_async(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t tri_cuemu_rt_stream_create(cudaStream_t *s, unsigned flags);
cudaError_t tri_cuemu_rt_stream_destroy(cudaStream_t s);
cudaError_t tri_cuemu_rt_stream_sync(cudaStream_t s);
cudaError_t tri_cuemu_rt_get_last_error(void);
const char *tri_cuemu_rt_error_name(cudaError_t e);
const char *tri_cuemu_rt_error_string(cudaError_t e);
cudaError_t tri_cuemu_rt_event_create(cudaEvent_t *e);
cudaError_t tri_cuemu_rt_event_destroy(cudaEvent_t e);
cudaError_t tri_cuemu_rt_event_record(cudaEvent_t e, cudaStream_t s);
cudaError_t tri_cuemu_rt_event_sync(cudaEvent_t e);
cudaError_t tri_cuemu_rt_event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end);
/* The stream waits for the event (which must be live and recorded). */
cudaError_t tri_cuemu_rt_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags);
/* Page-locked host memory: plain host memory filled with 0xff bytes, kept in
 * a table of its own (never device memory: a copy's kind must say so);
 * cudaFreeHost of anything else is cudaErrorInvalidValue. */
cudaError_t tri_cuemu_rt_host_alloc(void **p, size_t bytes, unsigned flags);
cudaError_t tri_cuemu_rt_free_host(void *p);

/* For tests: device bytes live now, allocations live now, stream syncs so
 * far; events live now, event records and event waits so far. */
typedef struct tri_cuemu_rt_stats {
    size_t live_bytes, live_allocs;
    uint64_t syncs, copies;
    size_t live_events;
    uint64_t event_records, event_syncs;
    size_t live_host_bytes, live_host_allocs; /* cudaHostAlloc's */
    uint64_t stream_waits;                    /* cudaStreamWaitEvent calls */
    uint64_t d2h_bytes;                       /* bytes copied device to host so far */
} tri_cuemu_rt_stats;
void tri_cuemu_rt_stats_get(tri_cuemu_rt_stats *s);
/* For tests: the next `n` cudaMallocAsync calls fail with
 * cudaErrorMemoryAllocation (0 turns it off). */
void tri_cuemu_rt_fail_next_mallocs(int n);
/* For tests: the next cudaStreamSynchronize reports `e` (0 turns it off), as
 * the wait after a kernel that faulted asynchronously would on a GPU. */
void tri_cuemu_rt_fault_next_sync(cudaError_t e);

#ifdef __cplusplus
}
#endif

#endif
