/* `trident tokenize train|encode|decode`: the command line of the BPE
 * tokenizer (data/tok/tokenizer.h), its encode pipeline (data/tok/encode.h)
 * and the token files (data/dataset.h). One option table per sub-command;
 * `trident tokenize --help` prints the three. */
#include "cli/cmd_tokenize.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/log.h"
#include "base/opt.h"
#include "base/status.h"
#include "base/stop.h"
#include "data/dataset.h"
#include "data/text.h"
#include "data/tok/encode.h"
#include "data/tok/tokenizer.h"

#define TOKENIZER_HELP                                                           \
    "a tokenizer.json, a GPT-2 vocab.json (merges.txt beside it), a directory\n" \
    "holding tokenizer.json or vocab.json + merges.txt, or a prefix P of\n"      \
    "Pvocab.json + Pmerges.txt"
#define BYTES_HELP   "the byte tokenizer instead (id = byte value, vocab 256, no EOT)"
#define THREADS_HELP "threads (default: all cores)"

/* ---- the tables ------------------------------------------------------------------------- */

typedef struct train_args {
    long vocab;
    const char *out, *pattern;
    int threads;
    tri_opt_list corpus;
} train_args;

typedef struct encode_args {
    const char *tok_path, *format, *out;
    int bytes, jsonl, quiet, threads, split_special;
    tri_opt_list inputs;
} encode_args;

typedef struct decode_args {
    const char *tok_path, *format;
    int bytes;
    tri_opt_list input;
} decode_args;

/* Each sub-command's table lives on the stack of its *_options function:
 * with help != NULL it prints the help there, otherwise it parses argv
 * (argv[0] is the sub-command) into *a. Returns a TRI_OPT_* result. */
static int train_options(train_args *a, int argc, char **argv, FILE *help) {
    const tri_opt opts[] = {
        {"--vocab-size", TRI_OPT_LONG, &a->vocab, "N", 257, 1L << 30,
         .help = "tokens in the vocabulary, the 256 bytes and the special tokens included"},
        {"--pattern", TRI_OPT_STR, &a->pattern, "gpt2|llama3", .choices = "gpt2|llama3",
         .help = "split pattern: gpt2 (default) or llama3 (Llama 3 / GPT-4)"},
        {"--out", TRI_OPT_STR, &a->out, "tok.json", .help = "the tokenizer.json to write"},
        {"--threads", TRI_OPT_INT, &a->threads, "K", 1, 4096, .help = THREADS_HELP},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident tokenize train",
        .who = "tokenize train",
        .usage = "--vocab-size N --out tok.json [--pattern gpt2|llama3] [--threads K] CORPUS...",
        .about = "  learn a byte-level BPE tokenizer from text files (.xz read through xz -dc);\n"
                 "  N counts the 256 bytes and the special tokens (gpt2: N >= 257, llama3:\n"
                 "  N >= 258); writes a Hugging Face tokenizer.json\n",
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &a->corpus,
        .max_pos = -1,
        .pos_name = "CORPUS",
    };
    if (help) return tri_opt_help(&spec, help), TRI_OPT_HELP;
    return tri_opt_parse(&spec, argc, argv);
}

static int encode_options(encode_args *a, int argc, char **argv, FILE *help) {
    const tri_opt opts[] = {
        {"--tokenizer", TRI_OPT_STR, &a->tok_path, "tok.json", .help = TOKENIZER_HELP},
        {"--bytes", TRI_OPT_FLAG, &a->bytes, .help = BYTES_HELP},
        {"--format", TRI_OPT_STR, &a->format, "llmc|megatron", .choices = "llmc|megatron",
         .help = "the token-file format (above)"},
        {"--out", TRI_OPT_STR, &a->out, "PREFIX", .help = "the token file to write (PREFIX.bin ...)"},
        {"--jsonl", TRI_OPT_FLAG, &a->jsonl, .help = "one document per line of an INPUT (its \"text\" field)"},
        {"--threads", TRI_OPT_INT, &a->threads, "K", 1, 4096, .help = THREADS_HELP},
        {"--quiet", TRI_OPT_FLAG, &a->quiet, .help = "no progress lines"},
        {"--split-special-tokens", TRI_OPT_FLAG, &a->split_special,
         .help = "special tokens' text in INPUT is text, not their ids (Llama 3 kind)"},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident tokenize encode",
        .who = "tokenize encode",
        .usage = "(--tokenizer tok.json | --bytes) --format llmc|megatron --out PREFIX\n"
                 "                               [--jsonl] [--threads K] [--quiet] [--split-special-tokens] INPUT...",
        .about = "  text -> token file: one document per INPUT file, or with --jsonl one per\n"
                 "  line (its \"text\" field); <|endoftext|> separates documents\n"
                 "  (llmc: PREFIX.bin, EOT before each document, or <|begin_of_text|> where\n"
                 "  the tokenizer has it, as llm.c's Llama 3 files; megatron: PREFIX.bin +\n"
                 "  PREFIX.idx, EOT after each document, Llama 3: <|end_of_text|>)\n",
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &a->inputs,
        .max_pos = -1,
        .pos_name = "INPUT",
    };
    if (help) return tri_opt_help(&spec, help), TRI_OPT_HELP;
    return tri_opt_parse(&spec, argc, argv);
}

static int decode_options(decode_args *a, int argc, char **argv, FILE *help) {
    const tri_opt opts[] = {
        {"--tokenizer", TRI_OPT_STR, &a->tok_path, "tok.json", .help = TOKENIZER_HELP},
        {"--bytes", TRI_OPT_FLAG, &a->bytes, .help = BYTES_HELP},
        {"--format", TRI_OPT_STR, &a->format, "llmc|megatron", .choices = "llmc|megatron",
         .help = "the format the file must have"},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident tokenize decode",
        .who = "tokenize decode",
        .usage = "(--tokenizer tok.json | --bytes) [--format llmc|megatron] INPUT",
        .about = "  token file -> text on stdout (--format, if given, must match the file)\n",
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &a->input,
        .max_pos = 1,
        .pos_name = "INPUT",
    };
    if (help) return tri_opt_help(&spec, help), TRI_OPT_HELP;
    return tri_opt_parse(&spec, argc, argv);
}

/* The help of all three sub-commands, from their tables. */
static void tokenize_help(FILE *f) {
    train_args ta = {0};
    encode_args ea = {0};
    decode_args da = {0};
    train_options(&ta, 0, NULL, f);
    fputc('\n', f);
    encode_options(&ea, 0, NULL, f);
    fputc('\n', f);
    decode_options(&da, 0, NULL, f);
}

/* --tokenizer PATH or --bytes into *tk; returns TRI_EXIT_OK or TRI_EXIT_BAD_INPUT. */
static int get_tokenizer(tri_tokenizer *tk, const char *path, int bytes, const char *cmd) {
    if (bytes && path) return tri_error("tokenize %s: give --tokenizer or --bytes, not both", cmd), TRI_EXIT_BAD_INPUT;
    if (bytes) {
        tri_tokenizer_bytes(tk);
        return TRI_EXIT_OK;
    }
    if (!path) return tri_error("tokenize %s: needs --tokenizer FILE (or --bytes)", cmd), TRI_EXIT_BAD_INPUT;
    return tri_tokenizer_load(tk, path) ? TRI_EXIT_BAD_INPUT : TRI_EXIT_OK;
}

/* ---- train ------------------------------------------------------------------------------ */

static int cmd_train(int argc, char **argv) {
    train_args a = {0};
    int rc = train_options(&a, argc, argv, NULL);
    if (rc != TRI_OPT_GO) {
        tri_opt_list_free(&a.corpus);
        return tri_opt_exit(rc);
    }
    rc = TRI_EXIT_BAD_INPUT;
    const char *const *files = a.corpus.v;
    int n_files = a.corpus.n;
    uint64_t total;
    tri_tokenizer tk;
    if (!a.vocab || !a.out || !n_files) {
        tri_error("tokenize train: needs --vocab-size N, --out FILE and at least one CORPUS file");
        goto done;
    }
    if (tri_text_check(files, n_files, &total)) goto done;
    double t0 = tri_now_s();
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    int pattern = a.pattern && !strcmp(a.pattern, "llama3") ? TRI_TOK_PAT_LLAMA3 : TRI_TOK_PAT_GPT2;
    if (tri_tokenizer_train_pat(&tk, files, n_files, (int)a.vocab, a.threads, pattern)) {
        if (tri_stop_signal()) rc = tri_exit_signal(tri_stop_signal()); /* said; nothing was written */
        goto done;
    }
    double dt = tri_now_s() - t0;
    if (tri_tokenizer_save(&tk, a.out)) {
        tri_tokenizer_free(&tk);
        rc = TRI_EXIT_FAILURE;
        goto done;
    }
    tri_status_done("tokenize train: %d tokens (%d merges) from %d file%s in %.2f s -> %s", tk.vocab_size, tk.n_merges,
                    n_files, n_files == 1 ? "" : "s", dt, a.out);
    if (tk.vocab_size < a.vocab)
        tri_note("the corpus had no pair left to merge; the vocabulary is %d, not %ld", tk.vocab_size, a.vocab);
    tri_tokenizer_free(&tk);
    rc = TRI_EXIT_OK;
done:
    tri_opt_list_free(&a.corpus);
    return rc;
}

/* ---- encode ----------------------------------------------------------------------------- */

static int cmd_encode(int argc, char **argv) {
    encode_args a = {0};
    int rc = encode_options(&a, argc, argv, NULL);
    if (rc != TRI_OPT_GO) {
        tri_opt_list_free(&a.inputs);
        return tri_opt_exit(rc);
    }
    rc = TRI_EXIT_BAD_INPUT;
    tri_tokenizer tk = {0};
    tri_encode_cfg cfg = {
        .tk = &tk, .out_prefix = a.out, .format = a.format, .jsonl = a.jsonl, .n_threads = a.threads, .quiet = a.quiet};
    tri_encode_stats st;
    const char *const *files = a.inputs.v;
    int n_files = a.inputs.n;
    if (!a.format || !a.out || !n_files) {
        tri_error("tokenize encode: needs --format llmc|megatron, --out PREFIX and at least one INPUT");
        goto done;
    }
    int llmc = !strcmp(a.format, "llmc");
    if (tri_text_check(files, n_files, &cfg.total_bytes)) goto done;
    if ((rc = get_tokenizer(&tk, a.tok_path, a.bytes, "encode")) != TRI_EXIT_OK) goto done;
    if (a.split_special && tri_tokenizer_split_special(&tk, 1)) {
        rc = TRI_EXIT_FAILURE;
        goto done;
    }
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    rc = tri_encode_files(&cfg, files, n_files, &st);
    if (rc >= TRI_EXIT_SIGNAL_BASE)
        tri_error("tokenize encode: %s: stopped; nothing written (%s%s left as it was)",
                  tri_stop_name(rc - TRI_EXIT_SIGNAL_BASE), a.out, llmc ? ".bin" : ".bin/.idx");
    if (rc != TRI_EXIT_OK) goto done;
    double mb = (double)st.bytes / 1e6;
    tri_status_done("tokenize encode: %zu document%s, %zu tokens (%.2f bytes/token) from %.1f MB in %.1f s "
                    "(%.1f MB/s, %d thread%s) -> %s%s",
                    st.n_docs, st.n_docs == 1 ? "" : "s", st.n_tokens,
                    st.n_tokens ? (double)st.bytes / (double)st.n_tokens : 0.0, mb, st.seconds,
                    st.seconds > 0 ? mb / st.seconds : 0.0, st.n_threads, st.n_threads == 1 ? "" : "s", a.out,
                    llmc ? ".bin" : ".bin + .idx");
done:
    tri_tokenizer_free(&tk);
    tri_opt_list_free(&a.inputs);
    return rc;
}

/* ---- decode ----------------------------------------------------------------------------- */

/* Writes the text of every token of ds to stdout; the exit code. */
static int decode_to_stdout(const tri_tokenizer *tk, const tri_dataset *ds) {
    const size_t chunk = (size_t)1 << 20;
    int32_t *ids = malloc(chunk * sizeof *ids); /* (chunk,) */
    if (!ids) return TRI_EXIT_FAILURE;
    int rc = TRI_EXIT_OK;
    for (size_t s = 0; s < ds->n_tokens && rc == TRI_EXIT_OK; s += chunk) {
        size_t n = ds->n_tokens - s < chunk ? ds->n_tokens - s : chunk;
        if (tri_dataset_read(ds, s, n, ids) != 0) {
            rc = TRI_EXIT_FAILURE;
            break;
        }
        char *text;
        size_t tl = tri_tokenizer_decode(tk, ids, n, &text);
        if (tl == SIZE_MAX) {
            rc = TRI_EXIT_BAD_INPUT;
            break;
        }
        size_t wr = fwrite(text, 1, tl, stdout);
        free(text);
        if (wr != tl) {
            tri_error("tokenize decode: error writing to stdout");
            rc = TRI_EXIT_FAILURE;
        }
    }
    free(ids);
    if (rc != TRI_EXIT_OK) return rc;
    if (fflush(stdout) != 0) {
        tri_error("tokenize decode: error writing to stdout");
        return TRI_EXIT_FAILURE;
    }
    return TRI_EXIT_OK;
}

static int cmd_decode(int argc, char **argv) {
    decode_args a = {0};
    int rc = decode_options(&a, argc, argv, NULL);
    if (rc != TRI_OPT_GO) {
        tri_opt_list_free(&a.input);
        return tri_opt_exit(rc);
    }
    const char *input = a.input.n ? a.input.v[0] : NULL;
    tri_opt_list_free(&a.input); /* input points into argv */
    if (!input) return tri_error("tokenize decode: needs an INPUT token file"), TRI_EXIT_BAD_INPUT;
    tri_tokenizer tk = {0};
    if ((rc = get_tokenizer(&tk, a.tok_path, a.bytes, "decode")) != TRI_EXIT_OK) return rc;
    tri_dataset ds;
    if (tri_dataset_open(&ds, input, tri_tokenizer_vocab_size(&tk))) {
        tri_tokenizer_free(&tk);
        return TRI_EXIT_BAD_INPUT;
    }
    if (a.format && strcmp(a.format, ds.format == TRI_DATA_LLMC ? "llmc" : "megatron") != 0) {
        tri_error("%s: --format %s, but the file is %s", input, a.format, tri_data_format_name(ds.format));
        rc = TRI_EXIT_BAD_INPUT;
    } else {
        rc = decode_to_stdout(&tk, &ds);
    }
    tri_dataset_close(&ds);
    tri_tokenizer_free(&tk);
    return rc;
}

int tri_cmd_tokenize(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        tokenize_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? TRI_EXIT_BAD_INPUT : TRI_EXIT_OK;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(sub, "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(sub, "decode")) return cmd_decode(argc - 1, argv + 1);
    return tri_error("tokenize: unknown subcommand '%s' (train, encode or decode)", sub), TRI_EXIT_BAD_INPUT;
}
