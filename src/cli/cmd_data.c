/* `trident data info PATH [--json] [--vocab V] [--seq-len T]`
 * `trident data dump PATH --doc N [--vocab V]`
 * One option table per sub-command; `trident data --help` prints both. */
#include "cli/cmd_data.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/json.h"
#include "base/opt.h"
#include "data/dataset.h"

#define PATH_ABOUT "  PATH: an llm.c token file, or a Megatron PREFIX.bin, PREFIX.idx or PREFIX\n"
#define VOCAB_HELP "check every token id is below V (errors name the byte offset)"

typedef struct data_args {
    int json;
    long vocab, seq_len;
    tri_opt_list doc; /* --doc: the value of each, checked after parsing (the last counts) */
    tri_opt_list path;
} data_args;

/* Each sub-command's table lives on the stack of its *_options function:
 * with help != NULL it prints the help there, otherwise it parses argv
 * (argv[0] is the sub-command) into *a. Returns a TRI_OPT_* result. */
static int info_options(data_args *a, int argc, char **argv, FILE *help) {
    const tri_opt opts[] = {
        {"--json", TRI_OPT_FLAG, &a->json, .help = "one JSON object instead of lines"},
        {"--vocab", TRI_OPT_LONG, &a->vocab, "V", 1, INT32_MAX, .help = VOCAB_HELP},
        {"--seq-len", TRI_OPT_LONG, &a->seq_len, "T", 1, INT32_MAX,
         .help = "also count training windows of T + 1 tokens"},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident data",
        .who = "data info",
        .usage = "info PATH [--json] [--vocab V] [--seq-len T]",
        .about = "  format, token dtype, documents, sequences, tokens and id range\n" PATH_ABOUT,
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &a->path,
        .max_pos = 1,
        .pos_name = "PATH",
    };
    if (help) return tri_opt_help(&spec, help), TRI_OPT_HELP;
    return tri_opt_parse(&spec, argc, argv);
}

static int dump_options(data_args *a, int argc, char **argv, FILE *help) {
    const tri_opt opts[] = {
        {"--doc", TRI_OPT_LIST, &a->doc, "N", .help = "document number, from 0"},
        {"--vocab", TRI_OPT_LONG, &a->vocab, "V", 1, INT32_MAX, .help = VOCAB_HELP},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident data",
        .who = "data dump",
        .usage = "dump PATH --doc N [--vocab V]",
        .about = "  the token ids of one document, space-separated, on one line\n" PATH_ABOUT,
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &a->path,
        .max_pos = 1,
        .pos_name = "PATH",
    };
    if (help) return tri_opt_help(&spec, help), TRI_OPT_HELP;
    return tri_opt_parse(&spec, argc, argv);
}

/* The help of both sub-commands, from their tables. */
static void data_help(FILE *f) {
    data_args a = {0};
    info_options(&a, 0, NULL, f);
    fputc('\n', f);
    dump_options(&a, 0, NULL, f);
}

static void print_info(const tri_dataset *ds, int json, long seq_len) {
    int64_t mn, mx;
    tri_dataset_minmax(ds, &mn, &mx);
    size_t windows = 0;
    if (seq_len > 0 && ds->n_tokens > 0) windows = (ds->n_tokens - 1) / (size_t)seq_len;
    if (json) {
        printf("{\"path\": ");
        tri_json_fputs(stdout, ds->path);
        printf(", \"format\": \"%s\", \"dtype\": \"%s\", \"token_bytes\": %d, "
               "\"documents\": %zu, \"sequences\": %zu, \"tokens\": %zu, "
               "\"min_token\": %lld, \"max_token\": %lld, \"bin\": ",
               ds->format == TRI_DATA_LLMC ? "llmc" : "megatron", tri_dtype_name(ds->dtype), ds->token_bytes,
               ds->n_docs, ds->n_seqs, ds->n_tokens, (long long)mn, (long long)mx);
        tri_json_fputs(stdout, ds->bin_path);
        if (ds->format == TRI_DATA_MEGATRON) {
            printf(", \"idx\": ");
            tri_json_fputs(stdout, ds->idx_path);
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
        return TRI_EXIT_BAD_INPUT;
    }
    enum { CHUNK = 65536 };
    int32_t *buf = malloc(CHUNK * sizeof *buf); /* (CHUNK,) */
    if (!buf) {
        tri_error("%s: out of memory", ds->path);
        return TRI_EXIT_FAILURE;
    }
    for (size_t off = 0; off < len; off += CHUNK) {
        size_t m = len - off < CHUNK ? len - off : CHUNK;
        if (tri_dataset_read(ds, start + off, m, buf) != 0) {
            free(buf);
            return TRI_EXIT_FAILURE;
        }
        for (size_t i = 0; i < m; i++) printf(off + i ? " %d" : "%d", (int)buf[i]);
    }
    putchar('\n');
    free(buf);
    if (fflush(stdout) != 0) {
        tri_error("data dump: cannot write to standard output");
        return TRI_EXIT_FAILURE;
    }
    return TRI_EXIT_OK;
}

int tri_cmd_data(int argc, char **argv) {
    if (argc < 2) {
        data_help(stderr);
        return TRI_EXIT_BAD_INPUT;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        data_help(stdout);
        return TRI_EXIT_OK;
    }
    int is_info = !strcmp(sub, "info"), is_dump = !strcmp(sub, "dump");
    if (!is_info && !is_dump)
        return tri_error("data: unknown subcommand '%s' (expected info or dump)", sub), TRI_EXIT_BAD_INPUT;
    data_args a = {0};
    int rc = is_info ? info_options(&a, argc - 1, argv + 1, NULL) : dump_options(&a, argc - 1, argv + 1, NULL);
    /* both point into argv */
    const char *path = a.path.n ? a.path.v[0] : NULL, *doc_arg = a.doc.n ? a.doc.v[a.doc.n - 1] : NULL;
    tri_opt_list_free(&a.path);
    tri_opt_list_free(&a.doc);
    if (rc != TRI_OPT_GO) return tri_opt_exit(rc);
    uint64_t doc = 0;
    if (doc_arg && tri_arg_u64("--doc", doc_arg, &doc)) return TRI_EXIT_BAD_INPUT;
    if (!path) return tri_error("data %s: no token file given", sub), TRI_EXIT_BAD_INPUT;
    if (is_dump && !doc_arg) return tri_error("data dump: --doc N is required"), TRI_EXIT_BAD_INPUT;
    tri_dataset ds;
    if (tri_dataset_open(&ds, path, (int)a.vocab) != 0) return TRI_EXIT_BAD_INPUT;
    rc = TRI_EXIT_OK;
    if (is_info)
        print_info(&ds, a.json, a.seq_len);
    else
        rc = dump_doc(&ds, doc);
    tri_dataset_close(&ds);
    return rc;
}
