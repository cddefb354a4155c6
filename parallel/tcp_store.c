/* The rendezvous store and the launcher environment (see tcp_store.h). */
#include "parallel/tcp_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void put_u32(unsigned char *p, uint32_t v) {
    uint32_t n = htonl(v);
    memcpy(p, &n, 4);
}

static uint32_t get_u32(const unsigned char *p) {
    uint32_t n;
    memcpy(&n, p, 4);
    return ntohl(n);
}

/* ------------------------------------------------------------------------ */
/* The server (rank 0): one thread, poll() over every connection            */

typedef struct kv {
    char *key;
    unsigned char *val;
    size_t len;
} kv;

typedef struct conn {
    int fd;
    unsigned char *buf; /* bytes received, not yet a whole request */
    size_t used, cap;
} conn;

struct tri_store_server {
    int listen_fd;
    int wake[2]; /* a byte written to wake[1] asks the thread to stop */
    pthread_t thread;
    double linger_s; /* after the stop request: serve until every connection closed, at most this */
    kv *kv;
    size_t n_kv, cap_kv;
    conn *conns;
    size_t n_conns, cap_conns;
};

static kv *kv_find(struct tri_store_server *sv, const char *key, size_t klen) {
    for (size_t i = 0; i < sv->n_kv; i++)
        if (strlen(sv->kv[i].key) == klen && memcmp(sv->kv[i].key, key, klen) == 0) return &sv->kv[i];
    return NULL;
}

/* Stores a value; -1 when out of memory (the connection is then dropped). */
static int kv_set(struct tri_store_server *sv, const char *key, size_t klen, const unsigned char *val, size_t len) {
    unsigned char *copy = malloc(len ? len : 1);
    if (copy == NULL) return -1;
    if (len) memcpy(copy, val, len);
    kv *e = kv_find(sv, key, klen);
    if (e == NULL) {
        if (sv->n_kv == sv->cap_kv) {
            size_t cap = sv->cap_kv ? 2 * sv->cap_kv : 64;
            kv *n = realloc(sv->kv, cap * sizeof *n);
            if (n == NULL) {
                free(copy);
                return -1;
            }
            sv->kv = n;
            sv->cap_kv = cap;
        }
        char *k = malloc(klen + 1);
        if (k == NULL) {
            free(copy);
            return -1;
        }
        memcpy(k, key, klen);
        k[klen] = '\0';
        e = &sv->kv[sv->n_kv++];
        e->key = k;
    } else {
        free(e->val);
    }
    e->val = copy;
    e->len = len;
    return 0;
}

static int send_all(int fd, const void *p, size_t n) {
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Answers the whole requests at the front of c->buf. Returns -1 when the
 * connection must be dropped (malformed request, write failure). */
static int serve_requests(struct tri_store_server *sv, conn *c) {
    size_t off = 0;
    for (;;) {
        if (c->used - off < 9) break;
        const unsigned char *h = c->buf + off;
        uint32_t klen = get_u32(h + 1), vlen = get_u32(h + 5);
        if (klen == 0 || klen > TRI_STORE_MAX_KEY || vlen > TRI_STORE_MAX_VALUE) return -1;
        if (c->used - off < 9 + (size_t)klen + vlen) break;
        const char *key = (const char *)h + 9;
        const unsigned char *val = h + 9 + klen;
        unsigned char ans[5];
        if (h[0] == 'S') {
            if (kv_set(sv, key, klen, val, vlen) != 0) return -1;
            ans[0] = 'K';
            put_u32(ans + 1, 0);
            if (send_all(c->fd, ans, 5) != 0) return -1;
        } else if (h[0] == 'G') {
            kv *e = kv_find(sv, key, klen);
            ans[0] = e ? 'V' : 'N';
            put_u32(ans + 1, e ? (uint32_t)e->len : 0);
            if (send_all(c->fd, ans, 5) != 0) return -1;
            if (e && e->len && send_all(c->fd, e->val, e->len) != 0) return -1;
        } else {
            return -1;
        }
        off += 9 + (size_t)klen + vlen;
    }
    memmove(c->buf, c->buf + off, c->used - off);
    c->used -= off;
    return 0;
}

/* Reads what c has sent and answers it; -1: close c. */
static int serve_conn(struct tri_store_server *sv, conn *c) {
    if (c->cap - c->used < 4096) {
        size_t cap = c->cap ? 2 * c->cap : 8192;
        if (cap > 2 * (size_t)TRI_STORE_MAX_VALUE + 2 * TRI_STORE_MAX_KEY + 8192) return -1;
        unsigned char *n = realloc(c->buf, cap);
        if (n == NULL) return -1;
        c->buf = n;
        c->cap = cap;
    }
    ssize_t r = recv(c->fd, c->buf + c->used, c->cap - c->used, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (r <= 0) return -1;
    c->used += (size_t)r;
    return serve_requests(sv, c);
}

static void conn_close(struct tri_store_server *sv, size_t i) {
    close(sv->conns[i].fd);
    free(sv->conns[i].buf);
    sv->conns[i] = sv->conns[--sv->n_conns];
}

static void accept_conn(struct tri_store_server *sv) {
    int fd = accept(sv->listen_fd, NULL, NULL);
    if (fd < 0) return;
    if (sv->n_conns == sv->cap_conns) {
        size_t cap = sv->cap_conns ? 2 * sv->cap_conns : 16;
        conn *n = realloc(sv->conns, cap * sizeof *n);
        if (n == NULL) {
            close(fd);
            return;
        }
        sv->conns = n;
        sv->cap_conns = cap;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sv->conns[sv->n_conns++] = (conn){.fd = fd};
}

static void *serve(void *arg) {
    struct tri_store_server *sv = arg;
    struct pollfd *pf = NULL;
    size_t cap_pf = 0;
    double stop_at = -1; /* once asked to stop: the latest time to keep serving */
    for (;;) {
        if (stop_at >= 0 && (sv->n_conns == 0 || tri_now_s() > stop_at)) break;
        if (cap_pf < sv->n_conns + 2) {
            cap_pf = 2 * (sv->n_conns + 2);
            struct pollfd *n = realloc(pf, cap_pf * sizeof *n);
            if (n == NULL) break; /* the clients see the connection close and say so */
            pf = n;
        }
        pf[0] = (struct pollfd){.fd = sv->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = sv->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < sv->n_conns; i++) pf[i + 2] = (struct pollfd){.fd = sv->conns[i].fd, .events = POLLIN};
        int rc = poll(pf, sv->n_conns + 2, stop_at >= 0 ? 50 : -1);
        if (rc < 0 && errno != EINTR) break;
        if (rc <= 0) continue;
        if (pf[0].revents) {
            char b;
            if (read(sv->wake[0], &b, 1) == 1 && stop_at < 0) stop_at = tri_now_s() + sv->linger_s;
        }
        /* connections first, from the back: conn_close moves the last into i */
        size_t n = sv->n_conns;
        for (size_t i = n; i-- > 0;)
            if (pf[i + 2].revents && serve_conn(sv, &sv->conns[i]) != 0) conn_close(sv, i);
        if (pf[1].revents) accept_conn(sv);
    }
    free(pf);
    return NULL;
}

static void server_free(struct tri_store_server *sv) {
    if (sv == NULL) return;
    while (sv->n_conns > 0) conn_close(sv, sv->n_conns - 1);
    free(sv->conns);
    for (size_t i = 0; i < sv->n_kv; i++) {
        free(sv->kv[i].key);
        free(sv->kv[i].val);
    }
    free(sv->kv);
    if (sv->listen_fd >= 0) close(sv->listen_fd);
    if (sv->wake[0] >= 0) close(sv->wake[0]);
    if (sv->wake[1] >= 0) close(sv->wake[1]);
    free(sv);
}

static int server_start(tri_store *s) {
    struct tri_store_server *sv = calloc(1, sizeof *sv);
    if (sv == NULL) return tri_error("rank 0: out of memory starting the store");
    sv->listen_fd = sv->wake[0] = sv->wake[1] = -1;
    sv->linger_s = s->timeout_s > 0 ? s->timeout_s : 60;
    if (pipe(sv->wake) != 0) {
        server_free(sv);
        return tri_error("rank 0: pipe for the store's server: %s", strerror(errno));
    }
    sv->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sv->listen_fd < 0) {
        int e = errno;
        server_free(sv);
        return tri_error("rank 0: socket for the store at %s:%d: %s", s->addr, s->port, strerror(e));
    }
    int one = 1;
    setsockopt(sv->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(sv->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(sv->listen_fd, 1024) != 0) {
        int e = errno;
        server_free(sv);
        return tri_error("rank 0: cannot serve the store on port %d (MASTER_PORT; MASTER_ADDR %s): %s", s->port,
                         s->addr, strerror(e));
    }
    if (s->port == 0) { /* any free port: the one the system chose */
        struct sockaddr_in got;
        socklen_t gl = sizeof got;
        if (getsockname(sv->listen_fd, (struct sockaddr *)&got, &gl) == 0) s->port = ntohs(got.sin_port);
    }
    int rc = pthread_create(&sv->thread, NULL, serve, sv);
    if (rc != 0) {
        server_free(sv);
        return tri_error("rank 0: cannot start the store's thread: %s", strerror(rc));
    }
    s->server = sv;
    return 0;
}

static void server_stop(struct tri_store_server *sv) {
    char b = 's';
    ssize_t w;
    do w = write(sv->wake[1], &b, 1);
    while (w < 0 && errno == EINTR);
    pthread_join(sv->thread, NULL);
    server_free(sv);
}

/* ------------------------------------------------------------------------ */
/* The client                                                               */

/* A client's error: said through tri_error, unless the store is quiet.
 * Returns -1. */
__attribute__((format(printf, 2, 3))) static int store_error(const tri_store *s, const char *fmt, ...) {
    if (s->quiet) return -1;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tri_error("%s", msg);
}

/* Connects to addr:port, retrying until the deadline. Returns the socket, or
 * -1 after a message. */
static int connect_until(const tri_store *s, double deadline) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(s->addr, port, &hints, &res);
    if (g != 0)
        return store_error(s, "rank %d: the store's address %s:%d (MASTER_ADDR:MASTER_PORT) does not resolve: %s", s->rank,
                         s->addr, s->port, gai_strerror(g));
    int last = 0;
    double pause = 0.01;
    for (;;) {
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) {
                last = errno;
                continue;
            }
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                freeaddrinfo(res);
                return fd;
            }
            last = errno;
            close(fd);
        }
        if (tri_now_s() + pause > deadline) break;
        sleep_s(pause);
        if (pause < 0.25) pause *= 2;
    }
    freeaddrinfo(res);
    return store_error(s, "rank %d: cannot reach the store at %s:%d within %.1f s (rank 0 serves it): %s", s->rank, s->addr,
                     s->port, s->timeout_s, strerror(last));
}

/* Exactly n bytes before the deadline; -1 after a message naming `key`. */
static int recv_until(const tri_store *s, void *p, size_t n, double deadline, const char *key) {
    unsigned char *c = p;
    while (n > 0) {
        int ms = (int)((deadline - tri_now_s()) * 1000);
        if (ms < 0) ms = 0;
        struct pollfd pf = {.fd = s->fd, .events = POLLIN};
        int rc = poll(&pf, 1, ms);
        if (rc < 0 && errno == EINTR) continue;
        if (rc == 0)
            return store_error(s, "rank %d: store at %s:%d: no answer for key '%s' within %.1f s", s->rank, s->addr, s->port,
                             key, s->timeout_s);
        ssize_t r = rc < 0 ? -1 : recv(s->fd, c, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return store_error(s, "rank %d: store at %s:%d closed the connection during key '%s' (is rank 0 gone?)", s->rank,
                             s->addr, s->port, key);
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int check_key(const tri_store *s, const char *key) {
    size_t k = key ? strlen(key) : 0;
    if (k == 0 || k > TRI_STORE_MAX_KEY)
        return store_error(s, "rank %d: store at %s:%d: key '%s' is empty or longer than %d bytes", s->rank, s->addr,
                         s->port, key ? key : "", TRI_STORE_MAX_KEY);
    return 0;
}

/* One request and the head of its answer. Returns the status byte, or -1. */
static int request(tri_store *s, char op, const char *key, const void *val, size_t len, uint32_t *ans_len) {
    if (check_key(s, key) != 0) return -1;
    if (len > TRI_STORE_MAX_VALUE)
        return store_error(s, "rank %d: store at %s:%d: value of key '%s' has %zu bytes (at most %u)", s->rank, s->addr,
                         s->port, key, len, TRI_STORE_MAX_VALUE);
    size_t klen = strlen(key);
    unsigned char h[9];
    h[0] = (unsigned char)op;
    put_u32(h + 1, (uint32_t)klen);
    put_u32(h + 5, (uint32_t)len);
    if (send_all(s->fd, h, 9) != 0 || send_all(s->fd, key, klen) != 0 || (len && send_all(s->fd, val, len) != 0))
        return store_error(s, "rank %d: store at %s:%d: sending key '%s': %s", s->rank, s->addr, s->port, key,
                         strerror(errno));
    unsigned char a[5];
    if (recv_until(s, a, 5, tri_now_s() + (s->timeout_s > 0 ? s->timeout_s : 60), key) != 0) return -1;
    *ans_len = get_u32(a + 1);
    return a[0];
}

int tri_store_set(tri_store *s, const char *key, const void *val, size_t len) {
    uint32_t n = 0;
    int st = request(s, 'S', key, val, len, &n);
    if (st < 0) return -1;
    if (st != 'K' || n != 0)
        return store_error(s, "rank %d: store at %s:%d: unexpected answer to set '%s'", s->rank, s->addr, s->port, key);
    return 0;
}

int tri_store_get(tri_store *s, const char *key, void *buf, size_t cap, size_t *len) {
    uint32_t n = 0;
    int st = request(s, 'G', key, NULL, 0, &n);
    if (st < 0) return -1;
    if (st == 'N') return 0;
    if (st != 'V' || n > TRI_STORE_MAX_VALUE)
        return store_error(s, "rank %d: store at %s:%d: unexpected answer to get '%s'", s->rank, s->addr, s->port, key);
    double deadline = tri_now_s() + (s->timeout_s > 0 ? s->timeout_s : 60);
    size_t take = n < cap ? n : cap;
    if (take && recv_until(s, buf, take, deadline, key) != 0) return -1;
    /* drain what does not fit, so the connection stays in step, then fail */
    unsigned char sink[256];
    for (size_t rest = n - take; rest > 0;) {
        size_t k = rest < sizeof sink ? rest : sizeof sink;
        if (recv_until(s, sink, k, deadline, key) != 0) return -1;
        rest -= k;
    }
    if (len) *len = n;
    if (n > cap)
        return store_error(s, "rank %d: store at %s:%d: key '%s' holds %u bytes, more than the %zu expected", s->rank,
                         s->addr, s->port, key, n, cap);
    return 1;
}

int tri_store_wait(tri_store *s, const char *key, void *buf, size_t cap, size_t *len, double timeout_s) {
    if (timeout_s <= 0) timeout_s = s->timeout_s;
    double t0 = tri_now_s(), pause = 0.001;
    for (;;) {
        int rc = tri_store_get(s, key, buf, cap, len);
        if (rc != 0) return rc < 0 ? -1 : 0;
        double waited = tri_now_s() - t0;
        if (timeout_s > 0 && waited >= timeout_s)
            return store_error(s, "rank %d: store at %s:%d: key '%s' was not set within %.1f s", s->rank, s->addr, s->port,
                             key, timeout_s);
        sleep_s(pause);
        if (pause < 0.05) pause *= 1.5;
    }
}

int tri_store_allgather(tri_store *s, const char *prefix, const void *mine, size_t len, void *all) {
    unsigned long seq = s->seq++;
    char key[TRI_STORE_MAX_KEY + 32];
    snprintf(key, sizeof key, "%s#%lu/%d", prefix, seq, s->rank);
    if (tri_store_set(s, key, mine, len) != 0) return -1;
    double t0 = tri_now_s(), pause = 0.001;
    unsigned char *got = calloc((size_t)s->world, 1), *scratch = NULL;
    if (all == NULL && len > 0) all = scratch = malloc((size_t)s->world * len);
    if (got == NULL || (all == NULL && len > 0)) {
        free(got);
        return tri_error("rank %d: out of memory in a rendezvous of %d ranks", s->rank, s->world);
    }
    int left = s->world;
    for (;;) {
        for (int r = 0; r < s->world; r++) {
            if (got[r]) continue;
            snprintf(key, sizeof key, "%s#%lu/%d", prefix, seq, r);
            size_t n = 0;
            int rc = tri_store_get(s, key, all ? (unsigned char *)all + (size_t)r * len : NULL, all ? len : 0, &n);
            if (rc < 0 || (rc == 1 && n != len)) {
                free(got);
                free(scratch);
                if (rc == 1)
                    tri_error("rank %d: store at %s:%d: rank %d set '%s' with %zu bytes, expected %zu", s->rank,
                              s->addr, s->port, r, key, n, len);
                return -1;
            }
            if (rc == 1) {
                got[r] = 1;
                left--;
            }
        }
        if (left == 0) break;
        if (s->timeout_s > 0 && tri_now_s() - t0 >= s->timeout_s) {
            char missing[512] = "";
            size_t used = 0;
            int shown = 0;
            for (int r = 0; r < s->world && used + 32 < sizeof missing; r++) {
                if (got[r]) continue;
                used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", shown ? "," : "", r);
                shown++;
            }
            if (shown < left) snprintf(missing + used, sizeof missing - used, ",...");
            snprintf(key, sizeof key, "%s#%lu/<rank>", prefix, seq);
            free(got);
            free(scratch);
            return tri_error("rank %d: store at %s:%d: rendezvous '%s': rank%s %s of %d did not arrive within %.1f s "
                             "(key '%s' not set)",
                             s->rank, s->addr, s->port, prefix, left == 1 ? "" : "s", missing, s->world, s->timeout_s,
                             key);
        }
        sleep_s(pause);
        if (pause < 0.05) pause *= 1.5;
    }
    free(got);
    free(scratch);
    return 0;
}

int tri_store_barrier(tri_store *s, const char *name) { return tri_store_allgather(s, name, NULL, 0, NULL); }

/* tri_store_init and tri_store_join: serve (rank 0 of init) or only connect. */
static int store_open(tri_store *s, const char *addr, int port, int rank, int world, double timeout_s, int serve) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->rank = rank;
    s->world = world;
    s->port = port;
    s->timeout_s = timeout_s;
    snprintf(s->addr, sizeof s->addr, "%s", addr ? addr : "");
    if (addr == NULL || *addr == '\0' || strlen(addr) >= sizeof s->addr)
        return tri_error("rank %d: the store's address (MASTER_ADDR) is empty or too long", rank);
    if ((port < 1 && !(port == 0 && serve)) || port > 65535)
        return tri_error("rank %d: the store's port %d (MASTER_PORT) is outside 1..65535", rank, port);
    if (world < 1 || rank < 0 || rank >= world)
        return tri_error("rank %d is out of range for a store of %d ranks (at %s:%d)", rank, world, addr, port);
    if (serve && server_start(s) != 0) return -1;
    double deadline = tri_now_s() + (timeout_s > 0 ? timeout_s : 1e9);
    s->fd = connect_until(s, deadline);
    if (s->fd < 0) {
        if (s->server) server_stop(s->server);
        s->server = NULL;
        return -1;
    }
    return 0;
}

int tri_store_init(tri_store *s, const char *addr, int port, int rank, int world, double timeout_s) {
    return store_open(s, addr, port, rank, world, timeout_s, rank == 0);
}

int tri_store_join(tri_store *s, const char *addr, int port, int rank, int world, double timeout_s) {
    return store_open(s, addr, port, rank, world, timeout_s, 0);
}

void tri_store_free(tri_store *s) {
    if (s == NULL) return;
    if (s->fd >= 0) close(s->fd);
    if (s->server) server_stop(s->server);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

/* ------------------------------------------------------------------------ */
/* The launcher's environment                                               */

static const char *plain_getenv(const char *name, void *ctx) {
    (void)ctx;
    return getenv(name);
}

/* An int in [lo, hi] from variable `name`: 1 and *v; 0 when unset; -1 with a message. */
static int env_int(tri_getenv_fn get, void *ctx, const char *name, long lo, long hi, int *v, char *err, size_t n) {
    const char *s = get(name, ctx);
    if (s == NULL || *s == '\0') return 0;
    errno = 0;
    char *end = NULL;
    long x = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi) {
        snprintf(err, n, "%s='%s' is not a whole number in %ld..%ld", name, s, lo, hi);
        return -1;
    }
    *v = (int)x;
    return 1;
}

int tri_slurm_first_host(const char *list, char *out, size_t n) {
    if (list == NULL || n == 0) return -1;
    size_t i = 0, o = 0;
    while (list[i] != '\0' && list[i] != ',' && list[i] != '[') {
        if (list[i] == ']') return -1;
        if (o + 1 >= n) return -1;
        out[o++] = list[i++];
    }
    if (list[i] == '[') {
        i++;
        if (list[i] < '0' || list[i] > '9') return -1;
        while (list[i] >= '0' && list[i] <= '9') {
            if (o + 1 >= n) return -1;
            out[o++] = list[i++];
        }
        /* the rest of the bracket: digits, '-' and ',' only, then ']' */
        while (list[i] != ']') {
            if (list[i] == '\0' || !((list[i] >= '0' && list[i] <= '9') || list[i] == '-' || list[i] == ',')) return -1;
            i++;
        }
        i++;
        /* a suffix after the bracket ("n[1-2]-ib") or a second bracket is not simple */
        if (list[i] != '\0' && list[i] != ',') return -1;
    }
    if (o == 0) return -1;
    out[o] = '\0';
    return 0;
}

int tri_launch_env_read(tri_launch_env *e, int use_slurm, tri_getenv_fn get, void *ctx, char *err, size_t errlen) {
    memset(e, 0, sizeof *e);
    e->local_rank = -1;
    if (get == NULL) get = plain_getenv;
    int rank = -1, world = -1, local = -1, port = -1, rc;
    const char *src = NULL;
    const char *rv = get("RANK", ctx), *wv = get("WORLD_SIZE", ctx);
    if ((rv && *rv) || (wv && *wv)) {
        if (!(rv && *rv) || !(wv && *wv)) {
            snprintf(err, errlen, "%s is set but %s is not (a torchrun-style launch sets both)",
                     rv && *rv ? "RANK" : "WORLD_SIZE", rv && *rv ? "WORLD_SIZE" : "RANK");
            return -1;
        }
        src = "torchrun";
        if (env_int(get, ctx, "WORLD_SIZE", 1, INT_MAX, &world, err, errlen) < 0) return -1;
        if (env_int(get, ctx, "RANK", 0, world - 1, &rank, err, errlen) < 0) return -1;
        if (env_int(get, ctx, "LOCAL_RANK", 0, world - 1, &local, err, errlen) < 0) return -1;
    } else if (use_slurm && get("SLURM_PROCID", ctx) && get("SLURM_NTASKS", ctx)) {
        src = "slurm";
        if (env_int(get, ctx, "SLURM_NTASKS", 1, INT_MAX, &world, err, errlen) < 0) return -1;
        if (env_int(get, ctx, "SLURM_PROCID", 0, world - 1, &rank, err, errlen) < 0) return -1;
        if (env_int(get, ctx, "SLURM_LOCALID", 0, world - 1, &local, err, errlen) < 0) return -1;
    } else {
        return 0;
    }
    e->source = src;
    e->rank = rank;
    e->world = world;
    e->local_rank = local;
    if (world == 1) return 1; /* nobody to meet: no store */

    const char *addr = get("MASTER_ADDR", ctx);
    if (addr && *addr) {
        if (strlen(addr) >= sizeof e->master_addr) {
            snprintf(err, errlen, "MASTER_ADDR is longer than %d bytes", TRI_STORE_ADDR_LEN - 1);
            return -1;
        }
        snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
    } else if (strcmp(src, "slurm") == 0) {
        const char *list = get("SLURM_JOB_NODELIST", ctx);
        const char *name = "SLURM_JOB_NODELIST";
        if (list == NULL || *list == '\0') {
            list = get("SLURM_NODELIST", ctx);
            name = "SLURM_NODELIST";
        }
        if (list == NULL || *list == '\0') {
            snprintf(err, errlen, "rank %d: MASTER_ADDR is not set and Slurm gives no node list (%s)", rank, name);
            return -1;
        }
        if (tri_slurm_first_host(list, e->master_addr, sizeof e->master_addr) != 0) {
            snprintf(err, errlen,
                     "rank %d: MASTER_ADDR is not set and %s='%s' is not a simple node list; set "
                     "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
                     rank, name, list);
            return -1;
        }
    } else {
        snprintf(err, errlen, "rank %d of %d: RANK and WORLD_SIZE are set but MASTER_ADDR is not (the host of rank 0)",
                 rank, world);
        return -1;
    }
    rc = env_int(get, ctx, "MASTER_PORT", 1, 65535, &port, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (strcmp(src, "slurm") != 0) {
            snprintf(err, errlen,
                     "rank %d of %d: RANK and WORLD_SIZE are set but MASTER_PORT is not (a free port on "
                     "MASTER_ADDR %s)",
                     rank, world, e->master_addr);
            return -1;
        }
        int job = 0;
        if (env_int(get, ctx, "SLURM_JOB_ID", 0, INT_MAX, &job, err, errlen) < 0) return -1;
        port = TRI_STORE_DEFAULT_PORT + job % 1000;
    }
    e->master_port = port;
    return 1;
}
