/* `trident data info PATH [--json] [--vocab V] [--seq-len T]`
 * `trident data dump PATH --doc N [--vocab V]` */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "cli/cli.h"
#include "cli/cmd_data.h"
#include "base/err.h"

static void data_usage(FILE *f) {
    fprintf(f, "usage: trident data info PATH [--json] [--vocab V] [--seq-len T]\n"
               "       trident data dump PATH --doc N [--vocab V]\n"
               "  PATH          an llm.c token file, or a Megatron PREFIX.bin, PREFIX.idx or PREFIX\n"
               "  info          format, token dtype, documents, sequences, tokens and id range\n"
               "  dump          the token ids of one document, space-separated, on one line\n"
               "  --json        (info) one JSON object instead of lines\n"
               "  --vocab V     check every token id is below V (errors name the byte offset)\n"
               "  --seq-len T   (info) also count training windows of T + 1 tokens\n"
               "  --doc N       (dump) document number, from 0\n");
}

/* Prints s as a JSON string literal. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_info(const tri_dataset *ds, int json, long seq_len) {
    int64_t mn, mx;
    tri_dataset_minmax(ds, &mn, &mx);
    size_t windows = 0;
    if (seq_len > 0 && ds->n_tokens > 0) windows = (ds->n_tokens - 1) / (size_t)seq_len;
    if (json) {
        printf("{\"path\": ");
        json_string(stdout, ds->path);
        printf(", \"format\": \"%s\", \"dtype\": \"%s\", \"token_bytes\": %d, "
               "\"documents\": %zu, \"sequences\": %zu, \"tokens\": %zu, "
               "\"min_token\": %lld, \"max_token\": %lld, \"bin\": ",
               ds->format == TRI_DATA_LLMC ? "llmc" : "megatron", tri_dtype_name(ds->dtype), ds->token_bytes,
               ds->n_docs, ds->n_seqs, ds->n_tokens, (long long)mn, (long long)mx);
        json_string(stdout, ds->bin_path);
        if (ds->format == TRI_DATA_MEGATRON) {
            printf(", \"idx\": ");
            json_string(stdout, ds->idx_path);
        }
        if (seq_len > 0) printf(", \"seq_len\": %ld, \"windows\": %zu", seq_len, windows);
        printf("}\n");
        return;
    }
    printf("path:       %s\n", ds->path);
    if (ds->format == TRI_DATA_MEGATRON) printf("files:      %s + %s\n", ds->bin_path, ds->idx_path);
    printf("format:     %s\n", tri_data_format_name(ds->format));
    printf("dtype:      %s (%d bytes per token)\n", tri_dtype_name(ds->dtype), ds->token_bytes);
    printf("documents:  %zu\n", ds->n_docs);
    printf("sequences:  %zu\n", ds->n_seqs);
    printf("tokens:     %zu\n", ds->n_tokens);
    if (ds->n_tokens > 0) printf("token ids:  %lld .. %lld\n", (long long)mn, (long long)mx);
    if (seq_len > 0) printf("windows:    %zu of %ld + 1 tokens\n", windows, seq_len);
}

static int dump_doc(const tri_dataset *ds, uint64_t doc) {
    size_t start, len;
    if (doc > SIZE_MAX || tri_dataset_doc(ds, (size_t)doc, &start, &len) != 0) {
        tri_error("%s: document %llu out of range (the file has %zu document%s)", ds->path, (unsigned long long)doc,
                  ds->n_docs, ds->n_docs == 1 ? "" : "s");
        return 2;
    }
    enum { CHUNK = 65536 };
    int32_t *buf = malloc(CHUNK * sizeof *buf); /* (CHUNK,) */
    if (!buf) {
        tri_error("%s: out of memory", ds->path);
        return 1;
    }
    for (size_t off = 0; off < len; off += CHUNK) {
        size_t m = len - off < CHUNK ? len - off : CHUNK;
        if (tri_dataset_read(ds, start + off, m, buf) != 0) {
            free(buf);
            return 1;
        }
        for (size_t i = 0; i < m; i++) printf(off + i ? " %d" : "%d", (int)buf[i]);
    }
    putchar('\n');
    free(buf);
    if (fflush(stdout) != 0) {
        tri_error("data dump: cannot write to standard output");
        return 1;
    }
    return 0;
}

int tri_cmd_data(int argc, char **argv) {
    if (argc < 2) {
        data_usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        data_usage(stdout);
        return 0;
    }
    int is_info = !strcmp(sub, "info"), is_dump = !strcmp(sub, "dump");
    if (!is_info && !is_dump) {
        tri_error("data: unknown subcommand '%s' (expected info or dump)", sub);
        return 2;
    }
    const char *path = NULL;
    int json = 0, have_doc = 0;
    long vocab = 0, seq_len = 0;
    uint64_t doc = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            data_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--vocab") && v) {
            if (tri_arg_int(a, v, 1, INT32_MAX, &vocab)) return 2;
            i++;
        } else if (is_info && !strcmp(a, "--json")) {
            json = 1;
        } else if (is_info && !strcmp(a, "--seq-len") && v) {
            if (tri_arg_int(a, v, 1, INT32_MAX, &seq_len)) return 2;
            i++;
        } else if (is_dump && !strcmp(a, "--doc") && v) {
            if (tri_arg_u64(a, v, &doc)) return 2;
            have_doc = 1;
            i++;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            tri_error("data %s: unknown or incomplete option '%s' (try `trident data --help`)", sub, a);
            return 2;
        }
    }
    if (!path) {
        tri_error("data %s: no token file given", sub);
        return 2;
    }
    if (is_dump && !have_doc) {
        tri_error("data dump: --doc N is required");
        return 2;
    }
    tri_dataset ds;
    if (tri_dataset_open(&ds, path, (int)vocab) != 0) return 2;
    int rc = 0;
    if (is_info)
        print_info(&ds, json, seq_len);
    else
        rc = dump_doc(&ds, doc);
    tri_dataset_close(&ds);
    return rc;
}
