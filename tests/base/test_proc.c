/* base/proc, base/str, base/log and base/err's prefixes: children started
 * and waited for (exit codes and signals by the shell's rule), the
 * executable's own path against /proc, and each message line as users see it. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/file.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/str.h"
#include "helpers/testutil.h"

Test(proc, exit_codes_and_signals_follow_the_shell) {
    const char *ok[] = {"/bin/sh", "-c", "exit 0", NULL};
    const char *five[] = {"/bin/sh", "-c", "exit 5", NULL};
    const char *killed[] = {"/bin/sh", "-c", "kill -TERM $$", NULL};
    tri_spawn_opts o = {.out_fd = -1};
    cr_assert_eq(tri_proc_wait(tri_proc_spawn(ok, &o)), 0);
    cr_assert_eq(tri_proc_wait(tri_proc_spawn(five, &o)), 5);
    cr_assert_eq(tri_proc_wait(tri_proc_spawn(killed, &o)), 128 + 15);
    cr_assert_eq(tri_exit_signal(15), 143);
}

Test(proc, a_child_that_cannot_start_says_so_and_exits_127) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/log", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const char *argv[] = {"/nonexistent/prog", "x", NULL};
    tri_spawn_opts o = {.out_fd = fd, .fail_pre = "sweep: ", .fail_post = " (build it)"};
    cr_assert_eq(tri_proc_wait(tri_proc_spawn(argv, &o)), TRI_EXIT_EXEC);
    close(fd);
    char *log = tt_read(path);
    cr_assert_str_eq(log, "trident: sweep: cannot run /nonexistent/prog: No such file or directory (build it)\n");
    free(log);
    /* the redirection took the child's stdout too */
    const char *echo[] = {"echo", "hello", NULL};
    fd = open(path, O_WRONLY | O_TRUNC);
    tri_spawn_opts p = {.out_fd = fd, .search_path = 1};
    cr_assert_eq(tri_proc_wait(tri_proc_spawn(echo, &p)), 0);
    close(fd);
    log = tt_read(path);
    cr_assert_str_eq(log, "hello\n");
    free(log);
    tt_rmrf(dir);
    free(dir);
}

Test(proc, self_exe_and_dir_are_procs_own) {
    char exe[4096], dir[4096], want[4096];
    cr_assert_eq(tri_self_exe(exe, sizeof exe), 0);
    ssize_t n = readlink("/proc/self/exe", want, sizeof want - 1);
    want[n] = '\0';
    cr_assert_str_eq(exe, want);
    cr_assert_eq(tri_self_dir(dir, sizeof dir), 0);
    cr_assert_eq(strlen(dir), (size_t)(strrchr(want, '/') - want));
    cr_assert_eq(strncmp(dir, want, strlen(dir)), 0);
    char tiny[4];
    cr_assert_eq(tri_self_exe(tiny, sizeof tiny), -1);
    cr_assert_str_empty(tiny);
    cr_assert_geq(tri_usable_cores(), 1);
    cr_assert_leq(tri_usable_cores(), sysconf(_SC_NPROCESSORS_CONF));
}

Test(proc, write_all_writes_everything_through_a_pipe) {
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    static char big[200000]; /* more than a pipe holds: short writes */
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        _exit(tri_write_all(fd[1], big, sizeof big) == 0 ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    char buf[4096];
    for (ssize_t r; (r = read(fd[0], buf, sizeof buf)) > 0; got += (size_t)r)
        cr_assert_eq(memcmp(buf, big + got, (size_t)r), 0, "bytes at %zu", got);
    close(fd[0]);
    cr_assert_eq(got, sizeof big);
    cr_assert_eq(tri_proc_wait(pid), 0);
}

Test(proc, strings) {
    cr_assert_str_eq(tri_base_name("a/b/c.json"), "c.json");
    cr_assert_str_eq(tri_base_name("c.json"), "c.json");
    cr_assert(tri_ends_with("x.tar.xz", ".xz"));
    cr_assert(!tri_ends_with("xz", ".xz"));
    char *s = tri_xprintf("%s-%d", "rank", 3);
    cr_assert_str_eq(s, "rank-3");
    free(s);
}

Test(proc, each_message_line_as_users_see_it) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/stderr", dir);
    tt_capture cap;
    tt_capture_begin(&cap, path);
    cr_assert_eq(tri_error("x.json: %s", "bad"), -1);
    cr_assert_eq(tri_error_rank(3, "stopped at step %d", 7), -1);
    tri_note("no <|endoftext|>");
    tri_warn("cannot write %s", "m.log");
    tri_note_rank(1, "late");
    char why[16];
    cr_assert_eq(tri_why(why, sizeof why, "tp %d does not divide %d heads", 3, 4), -1);
    char *err = tt_capture_end(&cap);
    cr_assert_str_eq(why, "tp 3 does not d", "truncated to the buffer, and not printed");
    cr_assert_str_eq(err, "trident: x.json: bad\n"
                          "trident: rank 3: stopped at step 7\n"
                          "trident: note: no <|endoftext|>\n"
                          "trident: warning: cannot write m.log\n"
                          "trident: rank 1: note: late\n");
    free(err);
    tt_rmrf(dir);
    free(dir);
}
