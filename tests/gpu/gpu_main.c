/* The entry point of tri_gpu_tests (tests/gpu/CMakeLists.txt): the op-table
 * and training-step comparisons of tests/cuemu/test_cuda_ops.c against the
 * real CUDA backend, or, where this process cannot have it, the reason and
 * exit code 77, which CTest reports as a skip (SKIP_RETURN_CODE):
 *
 *   gpu tests skipped: no CUDA device (cudaGetDeviceCount: ...)
 *
 * The probe (tri_ops_get's: the module loads, a driver and a device answer)
 * runs in a child process: a CUDA runtime initialised here would not survive
 * the fork of every Criterion test. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cuda_module.h"

/* 0 when the CUDA backend is usable; otherwise -1 with the reason in why. */
static int probe(char *why, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) {
        snprintf(why, n, "cannot probe the CUDA backend (pipe failed)");
        return -1;
    }
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "cannot probe the CUDA backend (fork failed)");
        return -1;
    }
    if (pid == 0) {
        char msg[4608];
        const tri_cuda_module *m = tri_cuda_module_get(msg, sizeof msg);
        const int ok = m != NULL && m->probe(msg, sizeof msg) == 0;
        if (!ok) {
            ssize_t left = (ssize_t)strlen(msg);
            const char *p = msg;
            while (left > 0) {
                const ssize_t w = write(fd[1], p, (size_t)left);
                if (w <= 0) break;
                p += w, left -= w;
            }
        }
        _exit(ok ? 0 : 1);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < n && (r = read(fd[0], why + len, n - 1 - len)) > 0) len += (size_t)r;
    why[len] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (len == 0) snprintf(why, n, "the CUDA probe process died (status %d)", status);
    return -1;
}

int main(int argc, char *argv[]) {
    char why[4608];
    if (probe(why, sizeof why) != 0) {
        printf("gpu tests skipped: %s\n", why);
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int rc = 0;
    if (criterion_handle_args(argc, argv, true)) rc = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return rc;
}
