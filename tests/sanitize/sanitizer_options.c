/* Linked into every program of a sanitizer build (TRI_SANITIZE / TRI_FUZZ;
 * CMakeLists.txt), never into a normal one.
 *
 * No allocation above 4 GiB: the suite never needs one, and a table sized by
 * a number read from a file (the bug class of issue 13 items 6 and 7) must be
 * a report (allocation-size-too-big), not a machine swapping.
 *
 * Leak checking is off in MPI ranks, and only there: Open MPI leaks by design
 * (its plugins' buffers are never freed, and their allocation stacks end in
 * dlclose'd modules, so no suppression can name them). A rank is recognised
 * by the OMPI_COMM_WORLD_SIZE that mpirun puts in its environment. Every
 * other process of the suite (the tests, single-rank trident, tridentrun)
 * keeps ASan's leak check. ASAN_OPTIONS in the environment still override
 * these defaults.
 *
 * ASan asks for its defaults while it starts up, before libc's getenv and
 * its own interceptors of read() and memcmp() may be used, so the environment
 * is read from /proc/self/environ with raw system calls and compared by
 * hand, in code that is not instrumented itself. */
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

NO_SANITIZE static int in_mpi_rank(void) {
    static const char key[] = "OMPI_COMM_WORLD_SIZE=";
    const long klen = (long)sizeof key - 1;
    char buf[4096];
    long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    long pos = 0; /* position inside the current variable; -1: not a match */
    int found = 0;
    for (;;) {
        long r = syscall(SYS_read, fd, buf, sizeof buf);
        if (r <= 0) break;
        for (long i = 0; i < r && !found; i++) {
            char c = buf[i];
            if (c == '\0') {
                pos = 0;
            } else if (pos >= 0 && pos < klen) {
                pos = c == key[pos] ? pos + 1 : -1;
                found = pos == klen;
            }
        }
        if (found) break;
    }
    syscall(SYS_close, fd);
    return found;
}

NO_SANITIZE const char *__asan_default_options(void);
NO_SANITIZE const char *__asan_default_options(void) {
    return in_mpi_rank() ? "max_allocation_size_mb=4096:detect_leaks=0" : "max_allocation_size_mb=4096";
}
