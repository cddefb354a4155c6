/* The emulator tests' way to watch a process die: runs fn() in a forked
 * child with stderr into a pipe, and returns what it wrote (malloc'd, at
 * most 64 KiB) with its wait status in *status. For failures that abort or
 * exit (a kernel misused, a CUDA call refused), whose message is the point. */
#ifndef TRI_TESTS_CUEMU_RUN_CHILD_H
#define TRI_TESTS_CUEMU_RUN_CHILD_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static inline char *run_child(void (*fn)(void), int *status) {
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd[0], buf + len, cap - 1 - len)) > 0) len += (size_t)r;
    buf[len] = '\0';
    close(fd[0]);
    waitpid(pid, status, 0);
    return buf;
}

#endif
