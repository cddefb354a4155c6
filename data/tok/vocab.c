/* Tokenizer files: loading a Hugging Face tokenizer.json or a GPT-2
 * vocab.json + merges.txt (tri_tokenizer_load) and writing tokenizer.json
 * (tri_tokenizer_save). Every entry is checked; errors name the file and
 * the entry (data/tok/tokenizer.h). */
#include "data/tok/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "data/bytemap.h"
#include "data/tok/internal.h"

/* ---- loading ----------------------------------------------------------------------- */

/* A token being loaded. */
typedef struct ltok {
    int present, added, special, normalized;
    int in_vocab;    /* an added token that model.vocab lists as the same string */
    int vocab_bytes; /* ... or as a byte-level key of the same bytes: a regular token too */
    size_t off, len; /* bytes in the loader's pool */
} ltok;

typedef struct loader {
    const char *file; /* for messages */
    ltok *tok;        /* (n_tok) indexed by id */
    int n_tok;
    /* Ids must be 0 .. N-1 without gaps, N the number of distinct tokens, so
     * an id at or above the number of entries in the file leaves a gap: it is
     * refused before anything is sized by it (memory follows the file, not
     * the largest id). */
    size_t id_limit;
    uint8_t *pool;
    size_t pool_len, pool_cap;
    tri_bmap by_bytes; /* token bytes -> id (regular tokens) */
    int match_added;   /* added tokens are matched in text: check their options */
} loader;

/* 1 if s holds an ASCII white-space byte right after a byte that is not
 * one: a place where the encode pipeline may cut text (tri_tokenizer_cut_after). */
static int ws_inside(const char *s) {
    for (size_t i = 1; s[i]; i++) {
        int w = s[i] == ' ' || (s[i] >= 0x09 && s[i] <= 0x0D);
        int pw = s[i - 1] == ' ' || (s[i - 1] >= 0x09 && s[i - 1] <= 0x0D);
        if (w && !pw) return 1;
    }
    return 0;
}

static int pool_add(loader *L, const void *p, size_t n, size_t *off) {
    if (L->pool_len + n > L->pool_cap) {
        size_t nc = L->pool_cap ? L->pool_cap : 1 << 16;
        while (nc < L->pool_len + n) nc *= 2;
        uint8_t *np = realloc(L->pool, nc);
        if (!np) return -1;
        L->pool = np;
        L->pool_cap = nc;
    }
    if (n) memcpy(L->pool + L->pool_len, p, n);
    *off = L->pool_len;
    L->pool_len += n;
    return 0;
}

static int loader_grow(loader *L, int id) {
    if (id < L->n_tok) return 0;
    int nn = L->n_tok ? L->n_tok : 1024;
    while (nn <= id) nn *= 2;
    ltok *nt = realloc(L->tok, (size_t)nn * sizeof *nt);
    if (!nt) return -1;
    memset(nt + L->n_tok, 0, (size_t)(nn - L->n_tok) * sizeof *nt);
    L->tok = nt;
    L->n_tok = nn;
    return 0;
}

static void loader_free(loader *L) {
    free(L->tok);
    free(L->pool);
    tri_bmap_free(&L->by_bytes);
}

static const char k_eot[] = TRI_TOK_EOT_TEXT;

#define MAX_VOCAB (1 << 30)

/* Entries of a JSON object or array (0 for anything else). */
static size_t json_count(const cJSON *x) {
    size_t n = 0;
    if (cJSON_IsObject(x) || cJSON_IsArray(x))
        for (const cJSON *e = x->child; e; e = e->next) n++;
    return n;
}

/* An id the file cannot fill without a gap; `where` names the entry. */
static int id_leaves_gap(const loader *L, int id, const char *where) {
    if ((size_t)id < L->id_limit) return 0;
    tri_error("%s: %s: id %d leaves a gap: the file has %zu token entries, so its ids must be 0 .. %zu "
              "without gaps",
              L->file, where, id, L->id_limit, L->id_limit ? L->id_limit - 1 : 0);
    return 1;
}

/* Reads the vocab object (string -> id); `what` names it in messages. */
static int load_vocab(loader *L, const cJSON *vocab, const char *what) {
    if (!cJSON_IsObject(vocab)) {
        tri_error("%s: %s is not a JSON object", L->file, what);
        return -1;
    }
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        const char *s = e->string;
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_VOCAB ||
            e->valuedouble != (double)(int)e->valuedouble) {
            tri_error("%s: %s[\"%s\"]: expected an integer id in [0, 2^30)", L->file, what, s);
            goto fail;
        }
        int id = (int)e->valuedouble;
        char where[96];
        snprintf(where, sizeof where, "%s[\"%.40s%s\"]", what, s, strlen(s) > 40 ? "..." : "");
        if (id_leaves_gap(L, id, where)) goto fail;
        size_t sl = strlen(s);
        if (sl > tmp_cap) {
            free(tmp);
            tmp_cap = sl * 2;
            tmp = malloc(tmp_cap);
            if (!tmp) goto oom;
        }
        if (loader_grow(L, id)) goto oom;
        ltok *t = &L->tok[id];
        if (t->present && !t->added) {
            tri_error("%s: %s[\"%s\"]: id %d is already used by another token", L->file, what, s, id);
            goto fail;
        }
        long nb = tri_tok_bytelevel_decode(s, sl, tmp);
        if (t->added) {
            /* tokenizer.json lists its added tokens in the vocab too, under the
             * same id, as the raw content or in byte-level characters */
            const uint8_t *c = L->pool + t->off;
            t->in_vocab = t->len == sl && memcmp(c, s, sl) == 0;
            t->vocab_bytes = nb > 0 && (size_t)nb == t->len && memcmp(c, tmp, t->len) == 0;
            if (t->vocab_bytes) { /* merges and the byte table may use it (HF's added "@") */
                int64_t *v = tri_bmap_upsert(&L->by_bytes, tmp, (size_t)nb, tri_bmap_hash(tmp, (size_t)nb), id);
                if (!v) goto oom;
            }
            if (t->in_vocab || t->vocab_bytes) continue;
            tri_error("%s: %s[\"%s\"]: id %d clashes with added_tokens \"%.*s\", which has the same id", L->file, what,
                      s, id, (int)(t->len > 60 ? 60 : t->len), (const char *)c);
            goto fail;
        }
        if (nb < 0) {
            tri_error("%s: %s[\"%s\"] (id %d): not a byte-level token (a character outside GPT-2's 256 "
                      "byte characters)",
                      L->file, what, s, id);
            goto fail;
        }
        if (nb == 0) {
            tri_error("%s: %s: the empty string is not a token", L->file, what);
            goto fail;
        }
        t->present = 1;
        if (pool_add(L, tmp, (size_t)nb, &t->off)) goto oom;
        t->len = (size_t)nb;
        int64_t *v = tri_bmap_upsert(&L->by_bytes, tmp, (size_t)nb, tri_bmap_hash(tmp, (size_t)nb), id);
        if (!v) goto oom;
    }
    free(tmp);
    return 0;
oom:
    tri_error("%s: out of memory", L->file);
fail:
    free(tmp);
    return -1;
}

/* Reads "added_tokens": [{"id": .., "content": "..", "special": ..}, ...]. */
static int load_added(loader *L, const cJSON *added) {
    if (!added || cJSON_IsNull(added)) return 0;
    if (!cJSON_IsArray(added)) {
        tri_error("%s: added_tokens is not an array", L->file);
        return -1;
    }
    int k = 0;
    for (const cJSON *e = added->child; e; e = e->next, k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(e, "special");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_VOCAB ||
            id->valuedouble != (double)(int)id->valuedouble || !cJSON_IsString(content) || !content->valuestring[0]) {
            tri_error("%s: added_tokens[%d]: expected an integer \"id\" and a non-empty \"content\"", L->file, k);
            return -1;
        }
        int i = (int)id->valuedouble;
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%d]", k);
        if (id_leaves_gap(L, i, where)) return -1;
        if (loader_grow(L, i)) goto oom;
        ltok *t = &L->tok[i];
        if (t->present) {
            tri_error("%s: added_tokens[%d]: id %d appears twice", L->file, k, i);
            return -1;
        }
        t->present = t->added = 1;
        t->special = cJSON_IsTrue(special);
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(e, "normalized");
        t->normalized = norm ? cJSON_IsTrue(norm) : !t->special; /* Hugging Face's default */
        if (L->match_added) {
            static const char *const k_opts[] = {"single_word", "lstrip", "rstrip"};
            for (int o = 0; o < 3; o++)
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, k_opts[o]))) {
                    tri_error("%s: added_tokens[%d] (\"%s\"): %s: only false is supported", L->file, k,
                              content->valuestring, k_opts[o]);
                    return -1;
                }
            if (ws_inside(content->valuestring)) {
                tri_error("%s: added_tokens[%d] (\"%s\"): white space after another character inside an added "
                          "token is not supported (Trident cuts text for parallel encoding there)",
                          L->file, k, content->valuestring);
                return -1;
            }
        }
        size_t cl = strlen(content->valuestring);
        if (pool_add(L, content->valuestring, cl, &t->off)) goto oom;
        t->len = cl;
    }
    return 0;
oom:
    tri_error("%s: out of memory", L->file);
    return -1;
}

/* Looks up a byte-level token string; returns its id or -1. */
static int lookup_str(loader *L, const char *s, size_t n, uint8_t *tmp) {
    long nb = tri_tok_bytelevel_decode(s, n, tmp);
    if (nb <= 0) return -1;
    int64_t *v = tri_bmap_find(&L->by_bytes, tmp, (size_t)nb, tri_bmap_hash(tmp, (size_t)nb));
    return v ? (int)*v : -1;
}

/* Appends merge (a, b) given as byte-level strings; `where` names it. */
static int add_merge(loader *L, tri_tokenizer *tk, const char *a, size_t la, const char *b, size_t lb,
                     const char *where, int32_t **merges, size_t *cap) {
    uint8_t *tmp = malloc(la + lb + 1);
    if (!tmp) {
        tri_error("%s: out of memory", L->file);
        return -1;
    }
    int ia = lookup_str(L, a, la, tmp), ib = lookup_str(L, b, lb, tmp);
    if (ia < 0 || ib < 0) {
        tri_error("%s: %s: token \"%.*s\" is not in the vocab", L->file, where, (int)(ia < 0 ? la : lb),
                  ia < 0 ? a : b);
        free(tmp);
        return -1;
    }
    size_t na = L->tok[ia].len, nb = L->tok[ib].len;
    memcpy(tmp, L->pool + L->tok[ia].off, na);
    memcpy(tmp + na, L->pool + L->tok[ib].off, nb);
    int64_t *v = tri_bmap_find(&L->by_bytes, tmp, na + nb, tri_bmap_hash(tmp, na + nb));
    free(tmp);
    if (!v) {
        tri_error("%s: %s: the merged token \"%.*s%.*s\" is not in the vocab", L->file, where, (int)la, a, (int)lb, b);
        return -1;
    }
    if ((size_t)tk->n_merges + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        int32_t *nm = tk->n_merges < MAX_VOCAB ? realloc(*merges, 3 * nc * sizeof *nm) : NULL;
        if (!nm) {
            tri_error("%s: out of memory for %d merges", L->file, tk->n_merges);
            return -1;
        }
        *merges = nm;
        *cap = nc;
    }
    int32_t *m = *merges + 3 * (size_t)tk->n_merges;
    m[0] = ia;
    m[1] = ib;
    m[2] = (int32_t)*v;
    tk->n_merges++;
    return 0;
}

/* Moves the loaded tokens into tk (after the merges are in). */
static int loader_finish(loader *L, tri_tokenizer *tk) {
    int n = 0;
    for (int i = 0; i < L->n_tok; i++)
        if (L->tok[i].present) n = i + 1;
    for (int i = 0; i < n; i++)
        if (!L->tok[i].present) {
            tri_error("%s: no token has id %d, but ids go up to %d: ids must be 0 .. N-1 without gaps", L->file, i,
                      n - 1);
            return -1;
        }
    tk->vocab_size = n;
    tk->eot = -1;
    tk->flags = calloc(n > 0 ? (size_t)n : 1, 1);
    tk->tok_off = malloc(((size_t)n + 1) * sizeof *tk->tok_off);
    tk->tok_bytes = malloc(L->pool_len + 1);
    if (!tk->flags || !tk->tok_off || !tk->tok_bytes) {
        tri_error("%s: out of memory", L->file);
        return -1;
    }
    for (int b = 0; b < 256; b++) tk->byte_id[b] = -1;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const ltok *t = &L->tok[i];
        tk->tok_off[i] = k;
        if (!t->present) continue;
        memcpy(tk->tok_bytes + k, L->pool + t->off, t->len);
        k += t->len;
        tk->flags[i] = (uint8_t)(TRI_TOK_PRESENT | (t->added ? TRI_TOK_ADDED : 0) | (t->special ? TRI_TOK_SPECIAL : 0) |
                                 (t->added && t->normalized ? TRI_TOK_NORMALIZED : 0));
        if ((!t->added || t->vocab_bytes) && t->len == 1) tk->byte_id[L->pool[t->off]] = i;
        if (t->len == sizeof k_eot - 1 && memcmp(L->pool + t->off, k_eot, t->len) == 0 && (tk->eot < 0 || t->added))
            tk->eot = i;
    }
    tk->tok_off[n] = k;
    /* GPT-2's vocab.json lists <|endoftext|> as a plain entry: mark it special */
    if (tk->eot >= 0) tk->flags[tk->eot] |= TRI_TOK_ADDED | TRI_TOK_SPECIAL;
    for (int b = 0; b < 256; b++)
        if (tk->byte_id[b] < 0) {
            uint32_t cp = tri_tokenizer_byte_char((uint8_t)b);
            char u[4];
            size_t ul = tri_tok_put_utf8(u, cp);
            tri_error("%s: the vocab has no token for byte 0x%02X (\"%.*s\"); a byte-level BPE vocab "
                      "needs all 256",
                      L->file, b, (int)ul, u);
            return -1;
        }
    if (tri_tok_build_pair_table(tk)) {
        tri_error("%s: out of memory", L->file);
        return -1;
    }
    return 0;
}

/* The "type" string of a component, or a placeholder for messages. */
static const char *type_of(const cJSON *obj) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : "(no type)";
}

static int is_type(const cJSON *obj, const char *want) { return strcmp(type_of(obj), want) == 0; }

/* Checks a ByteLevel pre-tokenizer `bl` (named `what`): add_prefix_space
 * false, use_regex as wanted (1: the GPT-2 pattern inside it, 0: none). */
static int check_bytelevel(const char *file, const cJSON *bl, const char *what, int use_regex) {
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space"))) {
        tri_error("%s: %s.add_prefix_space: only false is supported", file, what);
        return -1;
    }
    const cJSON *ur = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
    int has_regex = !cJSON_IsFalse(ur); /* Hugging Face's default is true */
    if (has_regex != use_regex) {
        tri_error("%s: %s.use_regex: only %s is supported here (%s)", file, what, use_regex ? "true" : "false",
                  use_regex ? "the GPT-2 pattern" : "the Split before it is the pattern");
        return -1;
    }
    return 0;
}

/* Which kind of byte-level BPE a tokenizer.json is: the normalizer (none),
 * the pre-tokenizer (ByteLevel with the GPT-2 pattern, or a Sequence of a
 * Split by the Llama 3 or GPT-2 pattern and a ByteLevel without its own),
 * the decoder (ByteLevel) and the post-processor (one that adds no more
 * than special tokens). Anything else is refused, naming it. */
static int hf_kind(const char *file, const cJSON *root, int *pattern, int *match_added) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        tri_error("%s: normalizer \"%s\" is not supported (a byte-level BPE of the GPT-2 or Llama 3 kind has none)",
                  file, type_of(norm));
        return -1;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    *pattern = TRI_TOK_PAT_GPT2;
    *match_added = 0;
    if (pre && !cJSON_IsNull(pre)) {
        if (is_type(pre, "ByteLevel")) {
            if (check_bytelevel(file, pre, "pre_tokenizer", 1)) return -1;
        } else if (is_type(pre, "Sequence")) {
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
            const cJSON *sp = cJSON_IsArray(ps) ? ps->child : NULL, *bl = sp ? sp->next : NULL;
            if (!sp || !bl || bl->next || !is_type(sp, "Split") || !is_type(bl, "ByteLevel")) {
                tri_error("%s: pre_tokenizer: a Sequence of [%s%s%s%s] is not supported; Trident implements "
                          "[Split, ByteLevel] (Llama 3, GPT-4) and ByteLevel (GPT-2)",
                          file, sp ? type_of(sp) : "", bl ? ", " : "", bl ? type_of(bl) : "",
                          bl && bl->next ? ", ..." : "");
                return -1;
            }
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
            const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
            const cJSON *beh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
            if (!cJSON_IsString(rx)) {
                tri_error("%s: pre_tokenizer.pretokenizers[0].pattern: only a \"Regex\" is supported", file);
                return -1;
            }
            if (!strcmp(rx->valuestring, tri_tok_pattern_llama3))
                *pattern = TRI_TOK_PAT_LLAMA3;
            else if (!strcmp(rx->valuestring, tri_tok_pattern_gpt2))
                *pattern = TRI_TOK_PAT_GPT2;
            else {
                tri_error("%s: pre_tokenizer.pretokenizers[0].pattern.Regex \"%.200s\" is not a split pattern "
                          "Trident implements (the Llama 3 / GPT-4 and the GPT-2 patterns)",
                          file, rx->valuestring);
                return -1;
            }
            /* both patterns match every character, so nothing lies between
             * the matches: "Removed" with invert (OLMo 2's form) keeps them
             * all just as "Isolated" does */
            int inv = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sp, "invert"));
            if (!cJSON_IsString(beh) ||
                !((!strcmp(beh->valuestring, "Isolated") && !inv) || (!strcmp(beh->valuestring, "Removed") && inv))) {
                tri_error("%s: pre_tokenizer.pretokenizers[0]: only behavior \"Isolated\" (or \"Removed\" with "
                          "invert) is supported",
                          file);
                return -1;
            }
            if (check_bytelevel(file, bl, "pre_tokenizer.pretokenizers[1]", 0)) return -1;
            *match_added = 1;
        } else {
            tri_error("%s: pre_tokenizer \"%s\" is not supported; Trident implements ByteLevel (GPT-2) and "
                      "Sequence [Split, ByteLevel] (Llama 3, GPT-4)",
                      file, type_of(pre));
            return -1;
        }
    }
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && !is_type(dec, "ByteLevel")) {
        tri_error("%s: decoder \"%s\" is not supported; a byte-level BPE decodes with ByteLevel", file, type_of(dec));
        return -1;
    }
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (post && !cJSON_IsNull(post)) {
        const cJSON *ps = is_type(post, "Sequence") ? cJSON_GetObjectItemCaseSensitive(post, "processors") : NULL;
        const cJSON *one = ps ? ps->child : post;
        for (; one; one = ps ? one->next : NULL)
            if (!is_type(one, "ByteLevel") && !is_type(one, "TemplateProcessing")) {
                tri_error("%s: post_processor \"%s\" is not supported (ByteLevel and TemplateProcessing are)", file,
                          type_of(one));
                return -1;
            }
    }
    return 0;
}

/* Hugging Face tokenizers does not take the id of an added token from the
 * file unless its content is a model.vocab entry: the others get, in file
 * order, the number of vocab entries, then one more than the largest id
 * given so far (AddedVocabulary::add_tokens). A file whose ids differ from
 * those would be encoded with other ids there, so it is refused. */
static int check_added_ids(loader *L, const cJSON *added, const cJSON *vocab) {
    if (!cJSON_IsArray(added)) return 0;
    const char *file = L->file;
    long n_vocab = (long)json_count(vocab), max_id = -1;
    int k = 0;
    for (const cJSON *e = added->child; e; e = e->next, k++) {
        const char *content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        long id = (long)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble, hf = -1;
        size_t cl = strlen(content);
        uint8_t *tmp = malloc(cl + 1);
        if (!tmp) {
            tri_error("%s: out of memory", file);
            return -1;
        }
        /* the vocab key equal to content: at the same id, or a regular
         * token (keys are byte-level strings: the same bytes, the same key) */
        long nb = tri_tok_bytelevel_decode(content, cl, tmp);
        int64_t *v = nb > 0 ? tri_bmap_find(&L->by_bytes, tmp, (size_t)nb, tri_bmap_hash(tmp, (size_t)nb)) : NULL;
        free(tmp);
        if (L->tok[id].in_vocab)
            hf = id;
        else if (v)
            hf = (long)*v;
        else
            hf = max_id < 0 || max_id < n_vocab ? n_vocab : max_id + 1;
        if (hf != id) {
            tri_error("%s: added_tokens[%d] (\"%.60s\") has id %ld, but Hugging Face tokenizers gives it id %ld "
                      "(added tokens not in model.vocab are numbered after its %ld entries, in order): the file "
                      "is inconsistent",
                      file, k, content, id, hf, n_vocab);
            return -1;
        }
        if (hf > max_id) max_id = hf;
    }
    return 0;
}

static int load_hf_json(tri_tokenizer *tk, const char *path) {
    char *text;
    size_t len;
    /* a named pipe or a directory is refused at once (base/file.h) */
    if (!(text = tri_slurp(path, "tokenizer", 0, &len))) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        tri_error("%s: not valid JSON (near byte %zu)", path, off);
        free(text);
        return -1;
    }
    free(text);
    loader L = {.file = path};
    int32_t *merges = NULL;
    size_t mcap = 0;
    char where[64];
    if (tri_bmap_init(&L.by_bytes, 1 << 16)) goto oom;
    if (!cJSON_IsObject(root)) {
        tri_error("%s: the top level is not a JSON object", path);
        goto fail;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        tri_error("%s: no \"model\" object (not a tokenizer.json?)", path);
        goto fail;
    }
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (mtype && !(cJSON_IsString(mtype) && strcmp(mtype->valuestring, "BPE") == 0)) {
        tri_error("%s: model.type is %s%s%s; only \"BPE\" is supported", path, cJSON_IsString(mtype) ? "\"" : "",
                  cJSON_IsString(mtype) ? mtype->valuestring : "not a string", cJSON_IsString(mtype) ? "\"" : "");
        goto fail;
    }
    int pattern = TRI_TOK_PAT_GPT2, match_added = 0;
    if (hf_kind(path, root, &pattern, &match_added)) goto fail;
    L.match_added = match_added;
    static const char *const k_empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, k_empty_keys[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0])) {
            tri_error("%s: model.%s: only null or \"\" is supported", path, k_empty_keys[i]);
            goto fail;
        }
    }
    int ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
        tri_error("%s: model.byte_fallback: only false is supported (a byte-level BPE has every byte)", path);
        goto fail;
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0)) {
        tri_error("%s: model.dropout: only null is supported (BPE dropout is random)", path);
        goto fail;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    L.id_limit = json_count(added) + json_count(vocab);
    if (load_added(&L, added)) goto fail;
    if (load_vocab(&L, vocab, "model.vocab")) goto fail;
    if (check_added_ids(&L, added, vocab)) goto fail;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(ms)) {
        tri_error("%s: model.merges is missing or not an array", path);
        goto fail;
    }
    int k = 0;
    for (const cJSON *e = ms->child; e; e = e->next, k++) {
        snprintf(where, sizeof where, "model.merges[%d]", k);
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) {
                tri_error("%s: %s: \"%s\" is not two tokens separated by one space", path, where, s);
                goto fail;
            }
            if (add_merge(&L, tk, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), where, &merges, &mcap)) goto fail;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            const char *a = e->child->valuestring, *b = e->child->next->valuestring;
            if (add_merge(&L, tk, a, strlen(a), b, strlen(b), where, &merges, &mcap)) goto fail;
        } else {
            tri_error("%s: %s: expected \"a b\" or [\"a\", \"b\"]", path, where);
            goto fail;
        }
    }
    tk->merges = merges;
    merges = NULL;
    if (loader_finish(&L, tk)) goto fail;
    tk->pattern = pattern;
    tk->ignore_merges = ignore_merges;
    tk->match_added = match_added;
    if (tk->eot < 0) /* Llama 3's end of text */
        for (int i = 0; i < tk->vocab_size; i++)
            if (tk->flags[i] & TRI_TOK_ADDED && tk->tok_off[i + 1] - tk->tok_off[i] == strlen(TRI_TOK_EOT3_TEXT) &&
                memcmp(tk->tok_bytes + tk->tok_off[i], TRI_TOK_EOT3_TEXT, strlen(TRI_TOK_EOT3_TEXT)) == 0)
                tk->eot = i;
    if ((ignore_merges && tri_tok_build_word_table(tk)) || (match_added && tri_tok_build_added(tk))) goto oom;
    loader_free(&L);
    cJSON_Delete(root);
    return 0;
oom:
    tri_error("%s: out of memory", path);
fail:
    free(merges);
    loader_free(&L);
    cJSON_Delete(root);
    tri_tokenizer_free(tk);
    return -1;
}

static int load_gpt2_files(tri_tokenizer *tk, const char *vocab_path, const char *merges_path) {
    char *text = NULL, *mtext = NULL;
    size_t len, mlen;
    cJSON *root = NULL;
    loader L = {.file = vocab_path};
    int32_t *merges = NULL;
    size_t mcap = 0;
    if (!(text = tri_slurp(vocab_path, "tokenizer", 0, &len))) return -1;
    if (!(mtext = tri_slurp(merges_path, "tokenizer", 0, &mlen))) {
        free(text);
        return -1;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        tri_error("%s: not valid JSON (near byte %zu)", vocab_path, off);
        goto fail;
    }
    if (tri_bmap_init(&L.by_bytes, 1 << 16)) {
        tri_error("%s: out of memory", vocab_path);
        goto fail;
    }
    L.id_limit = json_count(root);
    if (load_vocab(&L, root, "the vocab")) goto fail;
    L.file = merges_path;
    size_t pos = 0;
    char where[64];
    for (int line = 1; pos < mlen; line++) {
        char *s = mtext + pos, *nl = memchr(s, '\n', mlen - pos);
        size_t ll = nl ? (size_t)(nl - s) : mlen - pos;
        pos += ll + 1;
        if (ll && s[ll - 1] == '\r') ll--;
        if (ll == 0 || (line == 1 && ll >= 9 && memcmp(s, "#version:", 9) == 0)) continue;
        char *sp = memchr(s, ' ', ll);
        snprintf(where, sizeof where, "line %d", line);
        if (!sp || sp == s || sp + 1 == s + ll || memchr(sp + 1, ' ', (size_t)(s + ll - sp - 1))) {
            tri_error("%s: line %d: \"%.*s\" is not two tokens separated by one space", merges_path, line, (int)ll, s);
            goto fail;
        }
        if (add_merge(&L, tk, s, (size_t)(sp - s), sp + 1, (size_t)(s + ll - sp - 1), where, &merges, &mcap)) goto fail;
    }
    tk->merges = merges;
    merges = NULL;
    L.file = vocab_path;
    if (loader_finish(&L, tk)) goto fail;
    loader_free(&L);
    cJSON_Delete(root);
    free(text);
    free(mtext);
    return 0;
fail:
    free(merges);
    loader_free(&L);
    cJSON_Delete(root);
    free(text);
    free(mtext);
    tri_tokenizer_free(tk);
    return -1;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int tri_tokenizer_load(tri_tokenizer *tk, const char *path) {
    memset(tk, 0, sizeof *tk);
    char v[2048], m[2048];
    size_t pl = strlen(path);
    if (pl + 16 > sizeof v) {
        tri_error("%s: path too long", path);
        return -1;
    }
    if (is_dir(path)) {
        snprintf(v, sizeof v, "%s/tokenizer.json", path);
        if (exists(v)) return load_hf_json(tk, v);
        snprintf(v, sizeof v, "%s/vocab.json", path);
        snprintf(m, sizeof m, "%s/merges.txt", path);
        return load_gpt2_files(tk, v, m);
    }
    if (pl >= 10 && strcmp(path + pl - 10, "vocab.json") == 0) {
        snprintf(m, sizeof m, "%.*smerges.txt", (int)(pl - 10), path);
        return load_gpt2_files(tk, path, m);
    }
    if (exists(path)) return load_hf_json(tk, path);
    int why = errno; /* ENOENT: maybe a prefix of vocab.json + merges.txt; else the real reason */
    snprintf(v, sizeof v, "%svocab.json", path);
    snprintf(m, sizeof m, "%smerges.txt", path);
    if (exists(v)) return load_gpt2_files(tk, v, m);
    if (why != ENOENT)
        tri_error("%s: cannot open: %s", path, strerror(why));
    else
        tri_error("%s: no such tokenizer file (nor %s + %s)", path, v, m);
    return -1;
}

/* ---- saving ---------------------------------------------------------------------------- */

/* Writes n bytes as a JSON string body; byte_level maps each byte through
 * bytes_to_unicode first, otherwise the bytes are raw UTF-8. */
static void json_str(FILE *f, const uint8_t *p, size_t n, int byte_level) {
    char u[8];
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        uint32_t c = byte_level ? tri_tokenizer_byte_char(p[i]) : p[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", (unsigned)c);
        } else if (byte_level) {
            fwrite(u, 1, tri_tok_put_utf8(u, c), f);
        } else {
            fputc((int)c, f);
        }
    }
    fputc('"', f);
}

static void tok_str(FILE *f, const tri_tokenizer *tk, int id) {
    size_t a = tk->tok_off[id], b = tk->tok_off[id + 1];
    json_str(f, tk->tok_bytes + a, b - a, !(tk->flags[id] & TRI_TOK_ADDED));
}

int tri_tokenizer_save(const tri_tokenizer *tk, const char *path) {
    char tmp[2048];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        tri_error("%s: path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        tri_error("%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [", f);
    int first = 1;
    for (int i = 0; i < tk->vocab_size; i++) {
        if (!(tk->flags[i] & TRI_TOK_ADDED)) continue;
        fprintf(f, "%s\n    {\"id\": %d, \"content\": ", first ? "" : ",", i);
        tok_str(f, tk, i);
        fprintf(f,
                ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": %s, "
                "\"special\": %s}",
                tk->flags[i] & TRI_TOK_NORMALIZED ? "true" : "false",
                tk->flags[i] & TRI_TOK_SPECIAL ? "true" : "false");
        first = 0;
    }
    fputs(first ? "],\n" : "\n  ],\n", f);
    fputs("  \"normalizer\": null,\n", f);
    if (tk->match_added) { /* the Llama 3 form: Split by the pattern, then ByteLevel */
        fputs("  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
              "    {\"type\": \"Split\", \"pattern\": {\"Regex\": \"",
              f);
        for (const char *c = tk->pattern == TRI_TOK_PAT_LLAMA3 ? tri_tok_pattern_llama3 : tri_tok_pattern_gpt2; *c;
             c++) {
            if (*c == '\\' || *c == '"') fputc('\\', f);
            fputc(*c, f);
        }
        fputs(
            "\"}, \"behavior\": \"Isolated\", \"invert\": false},\n"
            "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n"
            "  ]},\n",
            f);
    } else {
        fputs("  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
              "\"use_regex\": true},\n",
              f);
    }
    fputs("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
          "\"use_regex\": true},\n"
          "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
          "\"use_regex\": true},\n"
          "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
          "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
          "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n",
          f);
    if (tk->ignore_merges) fputs("    \"ignore_merges\": true,\n", f); /* older readers lack the key */
    fputs("    \"vocab\": {", f);
    first = 1;
    for (int i = 0; i < tk->vocab_size; i++) {
        if (!(tk->flags[i] & TRI_TOK_PRESENT)) continue;
        fputs(first ? "\n      " : ",\n      ", f);
        tok_str(f, tk, i);
        fprintf(f, ": %d", i);
        first = 0;
    }
    fputs("\n    },\n    \"merges\": [", f);
    for (int r = 0; r < tk->n_merges; r++) {
        int a = tk->merges[3 * (size_t)r], b = tk->merges[3 * (size_t)r + 1];
        /* "a b": byte-level strings never hold a space (0x20 maps to U+0120) */
        size_t la = tk->tok_off[a + 1] - tk->tok_off[a], lb = tk->tok_off[b + 1] - tk->tok_off[b];
        fputs(r ? ",\n      \"" : "\n      \"", f);
        char u[8];
        for (size_t i = 0; i < la + lb; i++) {
            uint8_t byte = i < la ? tk->tok_bytes[tk->tok_off[a] + i] : tk->tok_bytes[tk->tok_off[b] + i - la];
            if (i == la) fputc(' ', f);
            uint32_t c = tri_tokenizer_byte_char(byte);
            if (c == '"' || c == '\\') fputc('\\', f);
            fwrite(u, 1, tri_tok_put_utf8(u, c), f);
        }
        fputc('"', f);
    }
    fputs("\n    ]\n  }\n}\n", f);
    int err = ferror(f);
    if (fflush(f) != 0) err = 1;
    if (fsync(fileno(f)) != 0) err = 1;
    if (fclose(f) != 0) err = 1;
    if (err) {
        tri_error("%s: write error: %s", tmp, strerror(errno));
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        tri_error("%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
