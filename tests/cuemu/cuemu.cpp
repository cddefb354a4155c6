// The CUDA emulation layer's scheduler (see cuemu.h and docs/cuda_emulation.md).
//
// A launch hands its blocks, in a seeded random order, to `workers` OS threads.
// A worker runs one block at a time: it makes one fiber per CUDA thread and
// repeats rounds until every fiber has finished:
//   1. run each runnable fiber, in a fresh random order, until it blocks (at
//      __syncthreads or a warp intrinsic) or returns;
//   2. compute every warp intrinsic whose mask's lanes have all arrived, and
//      make those lanes runnable; if any did, next round;
//   3. otherwise every live thread must wait at one and the same
//      __syncthreads: release them all, next round; anything else (threads
//      that exited, threads at another barrier, lanes waiting for lanes that
//      never come) is a divergence, reported and fatal.
// The tensor-core operations (mma, ldmatrix) are warp intrinsics of the same
// kind, computed in step 2 through the fragment tables of cuemu_tc.c; the
// cp.async copies are queued per thread and performed at its wait_group.
// Fibers switch with cuemu_switch below: six callee-saved registers, the SSE
// and x87 control words and the stack pointer (no system call, unlike
// swapcontext, which saves the signal mask). Other architectures use
// ucontext as a slow fallback (-DCUEMU_UCONTEXT forces it, for testing).
#include "tests/cuemu/cuemu.h"

#include "tests/cuemu/cuemu_tc.h"

// The hand-written switch on x86-64; ucontext elsewhere, or when built with
// -DCUEMU_UCONTEXT (to test the fallback here).
#if defined(__x86_64__) && !defined(CUEMU_UCONTEXT)
#define CUEMU_X86_SWITCH 1
#endif

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifndef CUEMU_X86_SWITCH
#include <ucontext.h>
#endif

namespace cuemu {

thread_local const Env *cur = nullptr;

namespace {

constexpr size_t STACK_BYTES = 128 * 1024; // per CUDA thread, plus one guard page
constexpr size_t STATIC_SMEM_MAX = 48 * 1024;
constexpr size_t DYN_SMEM_MAX = 227 * 1024;   // sm_90's opt-in maximum per block
constexpr uint32_t SMEM_POISON = 0x7fffffffu; // a NaN as float (and as double), INT_MAX as int

// ---- the context switch ----
#ifdef CUEMU_X86_SWITCH
extern "C" void cuemu_switch(void **save_sp, void *load_sp);
extern "C" [[noreturn]] void cuemu_fiber_main(void *fiber);
// cuemu_switch(save, load): pushes the callee-saved registers and the control
// words on the current stack, stores the stack pointer in *save, loads `load`
// and pops the same from there. A new fiber's stack is prepared so that the
// pops land in cuemu_fiber_entry with the fiber in r12.
asm(R"(
    .text
    .globl cuemu_switch
    .type cuemu_switch, @function
cuemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuemu_switch, .-cuemu_switch
    .type cuemu_fiber_entry, @function
cuemu_fiber_entry:
    movq %r12, %rdi
    andq $-16, %rsp
    call cuemu_fiber_main@PLT
    ud2
    .size cuemu_fiber_entry, .-cuemu_fiber_entry
    .section .note.GNU-stack,"",@progbits
    .text
)");
extern "C" char cuemu_fiber_entry[];
#endif

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct Block;

// A cp.async copy queued by a thread: performed at the cp_async_wait that
// covers its group (0 until committed).
struct AsyncCopy {
    unsigned char *dst;
    const unsigned char *src;
    int bytes, src_bytes, group;
    const char *file;
    int line;
};

struct Fiber {
    Env env;
    int lin; // linear thread index in the block
    State state;
    Block *blk;
    char *stack; // lowest usable byte; the guard page lies below
#ifdef CUEMU_X86_SWITCH
    void *sp;
#else
    ucontext_t uc;
#endif
    void *asan_fake = nullptr;
    // where it waits
    const char *file;
    int line;
    WarpOp op;
    unsigned mask;
    int arg, width;
    uint64_t in, out;
    int variant;          // LDMATRIX: the matrix count, plus 8 for .trans; 0 otherwise
    void *tc_out;         // MMA_BF16: d; LDMATRIX: r
    const void *tc_in[3]; // MMA_BF16: a, b, c; LDMATRIX: the row address
    // cp.async: the copies not yet performed (in issue order), groups committed
    std::vector<AsyncCopy> copies;
    int groups;
};

struct Site {
    const char *file;
    int line;
    size_t off, bytes;
};

// One launch, shared by its workers.
struct Launch {
    const char *kernel, *file;
    int line;
    dim3 grid, block;
    size_t smem;
    void (*body)(void *);
    void *arg;
    uint64_t seed;
    std::vector<uint32_t> order; // blocks in start order
    std::atomic<size_t> next{0};
};

struct Block {
    Launch *L;
    uint3 bid;
    int n; // threads
    std::vector<Fiber> *fibers;
#ifdef CUEMU_X86_SWITCH
    void *sched_sp;
#else
    ucontext_t sched_uc;
#endif
    const void *asan_sched_bottom = nullptr;
    size_t asan_sched_size = 0;
    unsigned char *smem_static, *smem_dyn;
    std::vector<Site> sites;
    size_t static_used;
};

// A worker's reusable memory: fiber stacks and shared memory.
struct Worker {
    std::vector<Fiber> fibers;
    std::vector<char *> stacks;
    std::vector<unsigned char> smem_static, smem_dyn;
    ~Worker() {
        for (char *s : stacks) munmap(s - getpagesize(), STACK_BYTES + getpagesize());
    }
};

// Idle workers, freed at exit (so that leak checkers see nothing left).
struct Pool {
    std::vector<Worker *> idle;
    ~Pool() {
        for (Worker *w : idle) delete w;
    }
};
std::mutex g_pool_mu, g_atomic_mu;
Pool g_pool;
std::atomic<uint64_t> g_seed{1}, g_launch_no{0};
std::atomic<int> g_workers{2};
std::atomic<uint64_t> st_launches{0}, st_blocks{0}, st_threads{0}, st_switches{0}, st_barriers{0}, st_warp_ops{0},
    st_mma{0}, st_ldmatrix{0}, st_async_copies{0};

thread_local Block *t_blk = nullptr;
thread_local Fiber *t_fiber = nullptr;

uint64_t splitmix(uint64_t &s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <class T> void shuffle(std::vector<T> &v, uint64_t &rng) {
    for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[splitmix(rng) % i]);
}

[[noreturn]] void vfail(const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (t_blk) {
        const Launch *L = t_blk->L;
        fprintf(stderr, "cuemu: kernel %s (launched at %s:%d), block (%u,%u,%u): %s\n", L->kernel, L->file, L->line,
                t_blk->bid.x, t_blk->bid.y, t_blk->bid.z, msg);
    } else {
        fprintf(stderr, "cuemu: %s\n", msg);
    }
    fflush(stderr);
    abort();
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(fmt, ap);
}

Worker *worker_get() {
    std::lock_guard<std::mutex> g(g_pool_mu);
    if (g_pool.idle.empty()) return new Worker();
    Worker *w = g_pool.idle.back();
    g_pool.idle.pop_back();
    return w;
}

void worker_put(Worker *w) {
    std::lock_guard<std::mutex> g(g_pool_mu);
    g_pool.idle.push_back(w);
}

char *stack_new() {
    const size_t page = (size_t)getpagesize();
    void *p = mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("cannot map a fiber stack of %zu bytes", STACK_BYTES);
    mprotect(p, page, PROT_NONE); // a stack overflow faults instead of writing over the next stack
    return (char *)p + page;
}

void poison(unsigned char *p, size_t bytes) {
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) memcpy(p + i, &SMEM_POISON, 4);
    for (; i < bytes; i++) p[i] = 0xff;
}

// ---- switching, with AddressSanitizer told about the stacks ----

void to_fiber(Block &b, Fiber &f) {
    t_fiber = &f;
    cur = &f.env;
    st_switches.fetch_add(1, std::memory_order_relaxed);
#ifdef CUEMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, STACK_BYTES);
#endif
#ifdef CUEMU_X86_SWITCH
    cuemu_switch(&b.sched_sp, f.sp);
#else
    swapcontext(&b.sched_uc, &f.uc);
#endif
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    t_fiber = nullptr;
    cur = nullptr;
}

// From the running fiber back to its block's scheduler; returns when the
// scheduler resumes it (never, for a fiber that is DONE).
void to_scheduler(Fiber &f) {
    Block &b = *f.blk;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(f.state == DONE ? nullptr : &f.asan_fake, b.asan_sched_bottom, b.asan_sched_size);
#endif
#ifdef CUEMU_X86_SWITCH
    cuemu_switch(&f.sp, b.sched_sp);
#else
    swapcontext(&f.uc, &b.sched_uc);
#endif
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake, nullptr, nullptr);
#endif
}

} // namespace

extern "C" [[noreturn]] void cuemu_fiber_main(void *p) {
    Fiber &f = *(Fiber *)p;
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &f.blk->asan_sched_bottom, &f.blk->asan_sched_size);
#endif
    f.blk->L->body(f.blk->L->arg);
    if (!f.copies.empty()) {
        const AsyncCopy &c = f.copies.front();
        fail("thread %d exits with %zu cp.async copies not waited for (the first issued at %s:%d, %s): every copy "
             "must be waited for (tri_cp_async_wait_group / tri_cp_async_wait_all) before the kernel ends",
             f.lin, f.copies.size(), c.file, c.line, c.group ? "committed" : "never committed");
    }
    f.state = DONE;
    to_scheduler(f);
    fail("a finished CUDA thread was resumed");
}

namespace {

#ifndef CUEMU_X86_SWITCH
void fiber_entry_uc(unsigned lo, unsigned hi) { cuemu_fiber_main((void *)(((uintptr_t)hi << 32) | lo)); }
#endif

void fiber_start(Fiber &f) {
#ifdef CUEMU_ASAN
    // the stack's last user left its frames' redzones poisoned
    __asan_unpoison_memory_region(f.stack, STACK_BYTES);
#endif
#ifdef CUEMU_X86_SWITCH
    // from the top: [return address = entry] rbp rbx r12 r13 r14 r15 [mxcsr, fpcw]
    uintptr_t top = ((uintptr_t)f.stack + STACK_BYTES) & ~(uintptr_t)15;
    uint64_t *s = (uint64_t *)top - 8;
    const uint32_t mxcsr = __builtin_ia32_stmxcsr();
    const uint16_t fpcw = 0x037f;
    memset(s, 0, 8 * sizeof *s);
    memcpy(s, &mxcsr, 4);
    memcpy((char *)s + 4, &fpcw, 2);
    s[4] = (uint64_t)(uintptr_t)&f; // r12
    s[7] = (uint64_t)(uintptr_t)cuemu_fiber_entry;
    f.sp = s;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = STACK_BYTES;
    f.uc.uc_link = nullptr;
    uintptr_t p = (uintptr_t)&f;
    makecontext(&f.uc, (void (*)())fiber_entry_uc, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
#endif
}

const char *op_name(WarpOp op) {
    switch (op) {
    case SHFL_IDX: return "__shfl_sync";
    case SHFL_UP: return "__shfl_up_sync";
    case SHFL_DOWN: return "__shfl_down_sync";
    case SHFL_XOR: return "__shfl_xor_sync";
    case BALLOT: return "__ballot_sync";
    case ANY: return "__any_sync";
    case ALL: return "__all_sync";
    case SYNCWARP: return "__syncwarp";
    case MMA_BF16: return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    case LDMATRIX: return "ldmatrix.sync.aligned.m8n8";
    }
    return "?";
}

// The intrinsic a fiber waits at, for messages: "name(mask 0x...)" (with
// ", width w" if asked), or the tensor-core instruction with its variant.
struct OpText {
    char s[96];
};
OpText op_text(const Fiber &f, bool width = false) {
    OpText t;
    if (f.op == LDMATRIX)
        snprintf(t.s, sizeof t.s, "%s.x%d%s.shared.b16", op_name(f.op), f.variant & 7, f.variant & 8 ? ".trans" : "");
    else if (f.op == MMA_BF16)
        snprintf(t.s, sizeof t.s, "%s", op_name(f.op));
    else if (width)
        snprintf(t.s, sizeof t.s, "%s(mask 0x%08x, width %d)", op_name(f.op), f.mask, f.width);
    else
        snprintf(t.s, sizeof t.s, "%s(mask 0x%08x)", op_name(f.op), f.mask);
    return t;
}

bool is_tensor_op(WarpOp op) { return op == MMA_BF16 || op == LDMATRIX; }

// Whether [p, p + bytes) lies in the block's shared memory (static or dynamic).
bool in_shared(const Block &b, const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)p, s = (uintptr_t)b.smem_static, d = (uintptr_t)b.smem_dyn;
    return (a >= s && a - s <= STATIC_SMEM_MAX && bytes <= STATIC_SMEM_MAX - (a - s)) ||
           (b.L->smem > 0 && a >= d && a - d <= b.L->smem && bytes <= b.L->smem - (a - d));
}

uint32_t bf16_pair(const uint32_t *regs, int i) { return regs[i / 2] >> (16 * (i % 2)) & 0xffffu; }

// mma.m16n8k16 .bf16 for the 32 lanes of the warp at fs[w0]: A, B and C
// gathered from every lane's registers by the fragment tables, the product
// of cuemu_tc.c, D scattered back (after every input is read: d may alias c).
void resolve_mma(std::vector<Fiber> &fs, int w0) {
    uint16_t A[16 * 16], B[16 * 8];
    float C[16 * 8], D[16 * 8];
    for (int lane = 0; lane < 32; lane++) {
        const Fiber &g = fs[w0 + lane];
        const uint32_t *a = (const uint32_t *)g.tc_in[0], *b = (const uint32_t *)g.tc_in[1];
        const float *c = (const float *)g.tc_in[2];
        for (int i = 0; i < 8; i++) {
            const tri_cuemu_rc p = tri_cuemu_frag_a(lane, i);
            A[p.row * 16 + p.col] = (uint16_t)bf16_pair(a, i);
        }
        for (int i = 0; i < 4; i++) {
            const tri_cuemu_rc p = tri_cuemu_frag_b(lane, i);
            B[p.row * 8 + p.col] = (uint16_t)bf16_pair(b, i);
        }
        for (int i = 0; i < 4; i++) {
            const tri_cuemu_rc p = tri_cuemu_frag_c(lane, i);
            C[p.row * 8 + p.col] = c[i];
        }
    }
    tri_cuemu_mma_16816_bf16(D, A, B, C);
    for (int lane = 0; lane < 32; lane++) {
        float *d = (float *)fs[w0 + lane].tc_out;
        for (int i = 0; i < 4; i++) {
            const tri_cuemu_rc p = tri_cuemu_frag_c(lane, i);
            d[i] = D[p.row * 8 + p.col];
        }
    }
    st_mma.fetch_add(1, std::memory_order_relaxed);
}

// ldmatrix for the warp at fs[w0]: the row addresses of the lanes that give
// them (cuemu_tc.h) checked (16 bytes of the block's shared memory, 16-byte
// aligned), every lane's registers filled by the fragment table.
void resolve_ldmatrix(const Block &b, std::vector<Fiber> &fs, int w0) {
    const int num = fs[w0].variant & 7, trans = (fs[w0].variant & 8) != 0;
    const unsigned char *rows[4][8];
    for (int j = 0; j < num; j++)
        for (int r = 0; r < 8; r++) {
            const Fiber &g = fs[w0 + tri_cuemu_ldmatrix_addr_lane(j, r)];
            const void *p = g.tc_in[0];
            if (!in_shared(b, p, 16) || (uintptr_t)p % 16 != 0)
                fail("thread %d's %s at %s:%d gives row %d of matrix %d at %p, which is not 16 bytes of the block's "
                     "shared memory at a 16-byte boundary",
                     g.lin, op_text(g).s, g.file, g.line, r, j, p);
            rows[j][r] = (const unsigned char *)p;
        }
    for (int lane = 0; lane < 32; lane++) {
        uint32_t *out = (uint32_t *)fs[w0 + lane].tc_out;
        for (int j = 0; j < num; j++) {
            uint32_t v = 0;
            for (int i = 0; i < 2; i++) {
                const tri_cuemu_rc p = tri_cuemu_ldmatrix_elem(lane, i, trans);
                uint16_t h;
                memcpy(&h, rows[j][p.row] + 2 * p.col, 2);
                v |= (uint32_t)h << (16 * i);
            }
            out[j] = v;
        }
    }
    st_ldmatrix.fetch_add(1, std::memory_order_relaxed);
}

// Computes the warp intrinsics whose lanes have all arrived; returns whether any did.
bool resolve_warps(Block &b) {
    std::vector<Fiber> &fs = *b.fibers;
    bool progress = false;
    for (int w0 = 0; w0 < b.n; w0 += 32) {
        const int lanes = std::min(32, b.n - w0);
        for (int l = 0; l < lanes; l++) {
            Fiber &f = fs[w0 + l];
            if (f.state != AT_WARP) continue;
            bool ready = true;
            for (int k = 0; k < lanes; k++) {
                if (!(f.mask >> k & 1)) continue;
                const Fiber &g = fs[w0 + k];
                if (g.state == AT_WARP &&
                    (g.op != f.op || g.mask != f.mask || g.width != f.width || g.variant != f.variant))
                    fail("lanes of one mask at different warp intrinsics: thread %d at %s %s:%d, thread %d at %s "
                         "%s:%d",
                         f.lin, op_text(f, true).s, f.file, f.line, g.lin, op_text(g, true).s, g.file, g.line);
                // .aligned: every lane of the warp executes the same instruction
                if (g.state == AT_WARP && is_tensor_op(f.op) && (g.line != f.line || strcmp(g.file, f.file) != 0))
                    fail("lanes of a warp at different %s instructions (.aligned: the whole warp runs one): thread "
                         "%d at %s:%d, thread %d at %s:%d",
                         f.op == MMA_BF16 ? "mma" : "ldmatrix", f.lin, f.file, f.line, g.lin, g.file, g.line);
                if (g.state != AT_WARP) ready = false;
            }
            if (!ready) continue;
            if (is_tensor_op(f.op)) {
                if (f.op == MMA_BF16)
                    resolve_mma(fs, w0);
                else
                    resolve_ldmatrix(b, fs, w0);
                for (int k = 0; k < 32; k++) fs[w0 + k].state = RUNNABLE;
                st_warp_ops.fetch_add(1, std::memory_order_relaxed);
                progress = true;
                continue;
            }
            // every lane of the mask is here: compute the results
            const unsigned mask = f.mask;
            const int width = f.width;
            uint64_t vote = 0;
            for (int k = 0; k < lanes; k++)
                if (mask >> k & 1) vote |= (uint64_t)(fs[w0 + k].in != 0) << k;
            for (int k = 0; k < lanes; k++) {
                if (!(mask >> k & 1)) continue;
                Fiber &g = fs[w0 + k];
                const int seg = k & ~(width - 1);
                int src = k;
                switch (f.op) {
                case SHFL_IDX: src = seg + (g.arg & (width - 1)); break;
                case SHFL_UP: src = k - g.arg >= seg ? k - g.arg : k; break;
                case SHFL_DOWN: src = k + g.arg < seg + width ? k + g.arg : k; break;
                case SHFL_XOR: src = (k ^ g.arg) >= seg && (k ^ g.arg) < seg + width ? k ^ g.arg : k; break;
                default: break;
                }
                if (f.op <= SHFL_XOR) {
                    if (src >= lanes || !(mask >> src & 1))
                        fail("thread %d's %s at %s:%d reads lane %d, which is not in its mask 0x%08x", g.lin,
                             op_name(f.op), g.file, g.line, src, mask);
                    g.out = fs[w0 + src].in;
                } else if (f.op == BALLOT) {
                    g.out = vote;
                } else if (f.op == ANY) {
                    g.out = vote != 0;
                } else if (f.op == ALL) {
                    g.out = vote == (uint64_t)mask;
                }
                g.state = RUNNABLE;
            }
            st_warp_ops.fetch_add(1, std::memory_order_relaxed);
            progress = true;
        }
    }
    return progress;
}

// Nothing runnable and no warp intrinsic complete: releases the barrier, or
// reports why the block cannot go on. Returns false when every thread is done.
bool resolve_barrier(Block &b) {
    std::vector<Fiber> &fs = *b.fibers;
    const Fiber *bar = nullptr, *other_bar = nullptr, *done = nullptr, *warp = nullptr;
    int n_bar = 0, n_done = 0;
    for (int i = 0; i < b.n; i++) {
        const Fiber &f = fs[i];
        if (f.state == DONE) {
            n_done++;
            if (!done) done = &f;
        } else if (f.state == AT_BARRIER) {
            n_bar++;
            if (!bar)
                bar = &f;
            else if ((f.line != bar->line || strcmp(f.file, bar->file) != 0) && !other_bar)
                other_bar = &f;
        } else if (f.state == AT_WARP && !warp) {
            warp = &f;
        }
    }
    if (warp) {
        // find a lane of its mask that is not at the intrinsic
        const int w0 = warp->lin & ~31;
        const Fiber *miss = nullptr;
        for (int k = 0; k < 32 && !miss; k++)
            if ((warp->mask >> k & 1) && fs[w0 + k].state != AT_WARP) miss = &fs[w0 + k];
        if (miss && miss->state == AT_BARRIER)
            fail("deadlock: thread %d waits at %s %s:%d for thread %d, which waits at __syncthreads %s:%d", warp->lin,
                 op_text(*warp).s, warp->file, warp->line, miss->lin, miss->file, miss->line);
        fail("deadlock: thread %d waits at %s %s:%d for thread %d, which has exited", warp->lin, op_text(*warp).s,
             warp->file, warp->line, miss ? miss->lin : -1);
    }
    if (n_bar == 0) return false;
    if (other_bar)
        fail("barrier divergence: threads wait at different __syncthreads: thread %d at %s:%d, thread %d at %s:%d",
             bar->lin, bar->file, bar->line, other_bar->lin, other_bar->file, other_bar->line);
    if (n_done > 0)
        fail("barrier divergence: %d threads wait at __syncthreads %s:%d while %d threads of the block have "
             "exited (thread %d among them)",
             n_bar, bar->file, bar->line, n_done, done->lin);
    for (int i = 0; i < b.n; i++) fs[i].state = RUNNABLE;
    st_barriers.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void run_block(Worker &w, Launch &L, uint32_t lin_bid) {
    Block b;
    b.L = &L;
    b.bid = {lin_bid % L.grid.x, lin_bid / L.grid.x % L.grid.y, lin_bid / (L.grid.x * L.grid.y)};
    b.n = (int)(L.block.x * L.block.y * L.block.z);
    b.fibers = &w.fibers;
    b.smem_static = w.smem_static.data();
    b.smem_dyn = w.smem_dyn.data();
    b.static_used = 0;
    poison(b.smem_static, STATIC_SMEM_MAX);
    poison(b.smem_dyn, L.smem);
    t_blk = &b;
    uint64_t rng = L.seed ^ (0xA24BAED4963EE407ull * (lin_bid + 1));
    splitmix(rng);
    for (int i = 0; i < b.n; i++) {
        Fiber &f = w.fibers[i];
        f.env.tid = {i % L.block.x, i / L.block.x % L.block.y, i / (L.block.x * L.block.y)};
        f.env.bid = b.bid;
        f.env.bdim = L.block;
        f.env.gdim = L.grid;
        f.lin = i;
        f.state = RUNNABLE;
        f.blk = &b;
        f.stack = w.stacks[i];
        f.asan_fake = nullptr;
        f.variant = 0;
        f.copies.clear();
        f.groups = 0;
        fiber_start(f);
    }
    std::vector<int> run;
    run.reserve(b.n);
    for (;;) {
        run.clear();
        for (int i = 0; i < b.n; i++)
            if (w.fibers[i].state == RUNNABLE) run.push_back(i);
        shuffle(run, rng);
        for (int i : run) to_fiber(b, w.fibers[i]);
        if (resolve_warps(b)) continue;
        if (!resolve_barrier(b)) break;
    }
    t_blk = nullptr;
    st_blocks.fetch_add(1, std::memory_order_relaxed);
    st_threads.fetch_add((uint64_t)b.n, std::memory_order_relaxed);
}

void work(Launch &L) {
    Worker *w = worker_get();
    const size_t n = (size_t)L.block.x * L.block.y * L.block.z;
    while (w->stacks.size() < n) w->stacks.push_back(stack_new());
    if (w->fibers.size() < n) w->fibers.resize(n);
    w->smem_static.resize(STATIC_SMEM_MAX);
    if (w->smem_dyn.size() < L.smem) w->smem_dyn.resize(L.smem);
    for (;;) {
        const size_t k = L.next.fetch_add(1);
        if (k >= L.order.size()) break;
        run_block(*w, L, L.order[k]);
    }
    worker_put(w);
}

Fiber &self(const char *what, const char *file, int line) {
    if (!t_fiber) fail("%s at %s:%d called outside a kernel", what, file, line);
    return *t_fiber;
}

} // namespace

void run(const char *kernel, const char *file, int line, dim3 grid, dim3 block, size_t smem, void (*body)(void *),
         void *arg) {
    if (t_fiber) fail("launch of %s at %s:%d from inside a kernel (no dynamic parallelism)", kernel, file, line);
    const uint64_t nb = (uint64_t)grid.x * grid.y * grid.z, nt = (uint64_t)block.x * block.y * block.z;
    if (nb == 0 || nt == 0 || nt > 1024 || block.z > 64 || grid.y > 65535 || grid.z > 65535 || nb > UINT32_MAX)
        fail("launch of %s at %s:%d: invalid configuration grid (%u,%u,%u), block (%u,%u,%u)", kernel, file, line,
             grid.x, grid.y, grid.z, block.x, block.y, block.z);
    if (smem > DYN_SMEM_MAX)
        fail("launch of %s at %s:%d: %zu bytes of dynamic shared memory (at most %zu)", kernel, file, line, smem,
             DYN_SMEM_MAX);
    Launch L;
    L.kernel = kernel;
    L.file = file;
    L.line = line;
    L.grid = grid;
    L.block = block;
    L.smem = smem;
    L.body = body;
    L.arg = arg;
    uint64_t s = g_seed.load() ^ (g_launch_no.fetch_add(1) * 0xD1B54A32D192ED03ull);
    L.seed = splitmix(s);
    L.order.resize(nb);
    for (uint32_t i = 0; i < nb; i++) L.order[i] = i;
    uint64_t r = L.seed;
    shuffle(L.order, r);
    st_launches.fetch_add(1, std::memory_order_relaxed);
    const int nw = (int)std::min<uint64_t>((uint64_t)std::max(1, g_workers.load()), nb);
    if (nw == 1) {
        work(L);
        return;
    }
    std::vector<std::thread> ts;
    for (int i = 0; i < nw; i++) ts.emplace_back([&L] { work(L); });
    for (std::thread &t : ts) t.join();
}

void syncthreads(const char *file, int line) {
    Fiber &f = self("__syncthreads", file, line);
    f.state = AT_BARRIER;
    f.file = file;
    f.line = line;
    to_scheduler(f);
}

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line) {
    Fiber &f = self(op_name(op), file, line);
    const int lane = f.lin & 31, lanes = std::min(32, f.blk->n - (f.lin & ~31));
    if (!(mask >> lane & 1))
        fail("thread %d calls %s at %s:%d with mask 0x%08x, which does not name its own lane %d", f.lin, op_name(op),
             file, line, mask, lane);
    if (lanes < 32 && (mask >> lanes) != 0)
        fail("thread %d calls %s at %s:%d with mask 0x%08x, but its warp has only %d threads", f.lin, op_name(op), file,
             line, mask, lanes);
    if (width < 1 || width > 32 || (width & (width - 1)) != 0)
        fail("thread %d calls %s at %s:%d with width %d (a power of 2 up to 32)", f.lin, op_name(op), file, line,
             width);
    f.state = AT_WARP;
    f.op = op;
    f.mask = mask;
    f.variant = 0;
    f.in = value;
    f.arg = arg;
    f.width = width;
    f.file = file;
    f.line = line;
    to_scheduler(f);
    return f.out;
}

namespace {

// A fiber arrives at a tensor-core rendezvous (the whole warp, full).
void tensor_arrive(Fiber &f, WarpOp op, int variant, const char *file, int line) {
    const int lanes = std::min(32, f.blk->n - (f.lin & ~31));
    f.op = op;
    f.variant = variant;
    f.file = file;
    f.line = line;
    if (lanes < 32)
        fail("thread %d calls %s at %s:%d in a warp of %d threads (it needs a full warp of 32)", f.lin, op_text(f).s,
             file, line, lanes);
    f.state = AT_WARP;
    f.mask = 0xffffffffu;
    f.width = 32;
    to_scheduler(f);
}

void perform(const AsyncCopy &c) {
    if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
    if (c.bytes > c.src_bytes) memset(c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
}

} // namespace

void mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b, const float *c, const char *file, int line) {
    Fiber &f = self("mma", file, line);
    f.tc_out = d;
    f.tc_in[0] = a;
    f.tc_in[1] = b;
    f.tc_in[2] = c;
    tensor_arrive(f, MMA_BF16, 0, file, line);
}

void ldmatrix(uint32_t *r, const void *row, int num, bool trans, const char *file, int line) {
    Fiber &f = self("ldmatrix", file, line);
    if (num != 1 && num != 2 && num != 4) fail("ldmatrix at %s:%d with %d matrices (1, 2 or 4)", file, line, num);
    f.tc_out = r;
    f.tc_in[0] = row;
    tensor_arrive(f, LDMATRIX, num | (trans ? 8 : 0), file, line);
}

void cp_async(void *dst, const void *src, int bytes, int src_bytes, bool cg, const char *file, int line) {
    Fiber &f = self("cp.async", file, line);
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fail("thread %d's cp.async at %s:%d copies %d bytes (4, 8 or 16)", f.lin, file, line, bytes);
    if (cg && bytes != 16) fail("thread %d's cp.async.cg at %s:%d copies %d bytes (16 only)", f.lin, file, line, bytes);
    if (src_bytes < 0 || src_bytes > bytes)
        fail("thread %d's cp.async at %s:%d reads %d source bytes of %d", f.lin, file, line, src_bytes, bytes);
    if (!in_shared(*f.blk, dst, (size_t)bytes) || (uintptr_t)dst % (uintptr_t)bytes != 0)
        fail("thread %d's cp.async at %s:%d writes %d bytes at %p, which are not the block's shared memory at a "
             "%d-byte boundary",
             f.lin, file, line, bytes, dst, bytes);
    if ((uintptr_t)src % (uintptr_t)bytes != 0)
        fail("thread %d's cp.async at %s:%d reads %d bytes from %p, which is not at a %d-byte boundary", f.lin, file,
             line, bytes, src, bytes);
    if (src_bytes > 0 && !tri_cuemu_rt_range_live(src, (size_t)src_bytes))
        fail("thread %d's cp.async at %s:%d reads %d bytes from %p, which are not inside one live device allocation",
             f.lin, file, line, src_bytes, src);
    // until the copy is performed, its destination reads as the poison
    unsigned char *d = (unsigned char *)dst;
    for (int i = 0; i < bytes; i += 4) memcpy(d + i, &SMEM_POISON, 4);
    f.copies.push_back({d, (const unsigned char *)src, bytes, src_bytes, 0, file, line});
    st_async_copies.fetch_add(1, std::memory_order_relaxed);
}

void cp_async_commit(const char *file, int line) {
    Fiber &f = self("cp.async.commit_group", file, line);
    f.groups++;
    for (AsyncCopy &c : f.copies)
        if (c.group == 0) c.group = f.groups;
}

void cp_async_wait(int pending, const char *file, int line) {
    Fiber &f = self("cp.async.wait_group", file, line);
    if (pending < 0) fail("thread %d's cp.async.wait_group %d at %s:%d (at least 0)", f.lin, pending, file, line);
    const int upto = f.groups - pending; // groups 1 .. upto are done
    size_t kept = 0;
    for (size_t i = 0; i < f.copies.size(); i++) {
        const AsyncCopy &c = f.copies[i];
        if (c.group != 0 && c.group <= upto)
            perform(c);
        else
            f.copies[kept++] = c;
    }
    f.copies.resize(kept);
}

void check_launch_pointer(const char *kernel, const char *file, int line, int index, const void *p) {
    if (p == nullptr) return;
    switch (tri_cuemu_rt_pointer_kind(p)) {
    case TRI_CUEMU_PTR_LIVE: return;
    case TRI_CUEMU_PTR_FREED:
        fail("launch of %s at %s:%d: argument %d (%p) points into a device allocation that has been freed", kernel,
             file, line, index, p);
    case TRI_CUEMU_PTR_NONE: break;
    }
    fail("launch of %s at %s:%d: argument %d (%p) lies in no live device allocation (a host pointer?)", kernel, file,
         line, index, p);
}

void *shared_static(size_t bytes, size_t align, const char *file, int line) {
    Fiber &f = self("SHARED", file, line);
    Block &b = *f.blk;
    for (const Site &s : b.sites)
        if (s.line == line && strcmp(s.file, file) == 0) {
            if (s.bytes != bytes) fail("SHARED at %s:%d asked for %zu bytes, then %zu", file, line, s.bytes, bytes);
            return b.smem_static + s.off;
        }
    const size_t off = (b.static_used + align - 1) / align * align;
    if (off + bytes > STATIC_SMEM_MAX)
        fail("SHARED at %s:%d: %zu bytes of static shared memory in all (at most %zu)", file, line, off + bytes,
             STATIC_SMEM_MAX);
    b.sites.push_back({file, line, off, bytes});
    b.static_used = off + bytes;
    return b.smem_static + off;
}

void *shared_dynamic(size_t align) {
    Fiber &f = self("DYN_SMEM", "?", 0);
    if ((uintptr_t)f.blk->smem_dyn % align != 0) fail("dynamic shared memory misaligned for %zu", align);
    return f.blk->smem_dyn;
}

void atomic_lock() { g_atomic_mu.lock(); }
void atomic_unlock() { g_atomic_mu.unlock(); }

} // namespace cuemu

extern "C" void tri_cuemu_set_seed(uint64_t seed) {
    cuemu::g_seed = seed;
    cuemu::g_launch_no = 0;
}

extern "C" void tri_cuemu_set_workers(int n) { cuemu::g_workers = n < 1 ? 1 : n; }

extern "C" void tri_cuemu_stats_get(tri_cuemu_stats *s) {
    using namespace cuemu;
    s->launches = st_launches;
    s->blocks = st_blocks;
    s->threads = st_threads;
    s->switches = st_switches;
    s->barriers = st_barriers;
    s->warp_ops = st_warp_ops;
    s->mma = st_mma;
    s->ldmatrix = st_ldmatrix;
    s->async_copies = st_async_copies;
}
