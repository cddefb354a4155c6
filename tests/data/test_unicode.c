/* The Llama 3 / GPT-4 pre-tokenizer (data/tok/unicode.c,
 * tri_tokenizer_pretoken_end_pat) and the safe cut points under it.
 *
 * Each expected split below is derived by hand from the pattern
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (alternatives tried in order at each position, each with backtracking);
 * the comment over a case gives the alternative that decides it. The
 * comparison with Hugging Face tokenizers on generated text is
 * tests/scripts/test_hf_tokenizer.py. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "data/tok/tokenizer.h"

static size_t split_pat(int pat, const char *text, size_t len, size_t *ends, size_t max) {
    size_t n = 0, pos = 0;
    while (pos < len) {
        size_t e = tri_tokenizer_pretoken_end_pat(pat, text, len, pos);
        cr_assert(e > pos && e <= len, "pre-token end %zu at %zu (len %zu)", e, pos, len);
        cr_assert(n < max);
        ends[n++] = e;
        pos = e;
    }
    return n;
}

/* Asserts that text (len bytes) splits into the NULL-terminated list want. */
static void expect(const char *text, const char *const *want) {
    size_t len = strlen(text);
    size_t ends[64];
    size_t n = split_pat(TRI_TOK_PAT_LLAMA3, text, len, ends, 64);
    size_t k = 0, start = 0;
    for (; want[k]; k++) {
        cr_assert(k < n, "\"%s\": only %zu pre-tokens, expected more (next \"%s\")", text, n, want[k]);
        size_t l = ends[k] - start;
        cr_assert(l == strlen(want[k]) && memcmp(text + start, want[k], l) == 0,
                  "\"%s\": pre-token %zu is \"%.*s\", expected \"%s\"", text, k, (int)l, text + start, want[k]);
        start = ends[k];
    }
    cr_assert_eq(n, k, "\"%s\": %zu pre-tokens, expected %zu", text, n, k);
}

Test(tok_llama3_split, contractions_in_any_case) {
    /* (?i:...) takes both cases; the word before is \p{L}+ */
    expect("I'M don'T we'Ll THEY'RE you'VE he'D IT'S it's",
           (const char *[]){"I", "'M", " don", "'T", " we", "'Ll", " THEY", "'RE", " you", "'VE", " he", "'D", " IT",
                            "'S", " it", "'s", NULL});
    /* 't then \p{L}+; " '" is " ?[^\s\p{L}\p{N}]+" (the apostrophe is no
     * letter, so [^\r\n\p{L}\p{N}]?\p{L}+ cannot start with " '"), then Sa */
    expect("'tis 'Sa", (const char *[]){"'t", "is", " '", "Sa", NULL});
    /* U+017F (long s) folds to s under (?i), so 'ſ is a contraction */
    expect("x'\xC5\xBF"
           "a",
           (const char *[]){"x", "'\xC5\xBF", "a", NULL});
    /* 'x is no contraction: [^\r\n\p{L}\p{N}]?\p{L}+ takes the apostrophe */
    expect("'xyz", (const char *[]){"'xyz", NULL});
    /* 'LLama: 'LL is the contraction */
    expect("'LLama", (const char *[]){"'LL", "ama", NULL});
}

Test(tok_llama3_split, numbers_in_threes) {
    /* \p{N}{1,3}; a space before a number stands alone (\s+) */
    expect("1234567 12", (const char *[]){"123", "456", "7", " ", "12", NULL});
    expect("x1234y", (const char *[]){"x", "123", "4", "y", NULL});
    /* Arabic-Indic digits are \p{N} too */
    expect("\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6", (const char *[]){"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6", NULL});
    /* "$" is punctuation before a number: " ?[^\s\p{L}\p{N}]+" */
    expect("$100", (const char *[]){"$", "100", NULL});
}

Test(tok_llama3_split, white_space_and_line_breaks) {
    /* \s+(?!\S) leaves the last space for " b" */
    expect("a  b", (const char *[]){"a", " ", " b", NULL});
    /* \s*[\r\n]+ takes runs up to their last line break */
    expect("a\n\nb", (const char *[]){"a", "\n\n", "b", NULL});
    expect("a \n b", (const char *[]){"a", " \n", " b", NULL});
    expect("\n  \n  x", (const char *[]){"\n  \n", " ", " x", NULL});
    expect("a\r\n\r\nb", (const char *[]){"a", "\r\n\r\n", "b", NULL});
    /* a tab prefixes letters ([^\r\n\p{L}\p{N}]?), a newline does not */
    expect("a\t\tb", (const char *[]){"a", "\t", "\tb", NULL});
    expect("\nword", (const char *[]){"\n", "word", NULL});
    /* trailing white space: \s+(?!\S) to the end */
    expect("x   ", (const char *[]){"x", "   ", NULL});
    /* NBSP is white space but may prefix letters */
    expect("a \xC2\xA0word", (const char *[]){"a", " ", "\xC2\xA0word", NULL});
}

Test(tok_llama3_split, punctuation_keeps_its_line_breaks) {
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    expect("end.\n\nNext", (const char *[]){"end", ".\n\n", "Next", NULL});
    expect("a !!\r\nb", (const char *[]){"a", " !!\r\n", "b", NULL});
    expect("x :) ", (const char *[]){"x", " :)", " ", NULL});
    /* "(" prefixes the letters; ")" then stands alone */
    expect("(hello)", (const char *[]){"(hello", ")", NULL});
    /* punctuation, then a space and a line break: \s*[\r\n]+ */
    expect("a. \nb", (const char *[]){"a", ".", " \n", "b", NULL});
}

Test(tok_llama3_split, other_scripts_marks_and_emoji) {
    /* CJK and Latin letters form one \p{L}+ run */
    expect("\xE4\xB8\xAD\xE6\x96\x87"
           "abc",
           (const char *[]){"\xE4\xB8\xAD\xE6\x96\x87"
                            "abc",
                            NULL});
    /* a combining mark (M*) is no letter: it prefixes the next letter */
    expect("e\xCC\x81t", (const char *[]){"e", "\xCC\x81t", NULL});
    /* Devanagari: virama (Mn) prefixes the next letter, the vowel sign
     * (Mc) at the end stands alone */
    expect("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
           (const char *[]){"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8", "\xE0\xA5\x8D\xE0\xA4\xA4", "\xE0\xA5\x87", NULL});
    /* Hebrew letters, then a space and an Arabic word */
    expect("\xD7\xA9\xD7\x9C \xD9\x85\xD8\xB1", (const char *[]){"\xD7\xA9\xD7\x9C", " \xD9\x85\xD8\xB1", NULL});
    /* emoji are punctuation-like: one run, then " ok" */
    expect("hi\xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok",
           (const char *[]){"hi", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80", " ok", NULL});
    /* an invalid byte is "other": it prefixes letters like punctuation */
    expect("a\xFF"
           "b",
           (const char *[]){"a",
                            "\xFF"
                            "b",
                            NULL});
}

/* A NUL byte is "other" too (not expressible in the C-string cases). */
Test(tok_llama3_split, nul_byte_prefixes_letters) {
    size_t ends[8];
    size_t n = split_pat(TRI_TOK_PAT_LLAMA3, "a\0b", 3, ends, 8);
    cr_assert_eq(n, 2);
    cr_assert_eq(ends[0], 1);
    cr_assert_eq(ends[1], 3);
}

Test(tok_llama3_split, gpt2_differs_where_the_patterns_do) {
    /* the same text under GPT-2's pattern, derived from it by hand */
    const char *text = "1234 x.\n\nIT'S";
    size_t ends[16];
    size_t n = split_pat(TRI_TOK_PAT_GPT2, text, strlen(text), ends, 16);
    /* "1234", " x", ".", "\n", "\n", "IT", "'", "S" (GPT-2's 's is lower case only) */
    size_t want[] = {4, 6, 7, 8, 9, 11, 12, 13};
    cr_assert_eq(n, 8);
    for (size_t i = 0; i < n; i++) cr_assert_eq(ends[i], want[i], "pre-token %zu", i);
    expect(text, (const char *[]){"123", "4", " x", ".\n\n", "IT", "'S", NULL});
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Cut points keep both patterns' splits: [0, c) and [c, len) pre-tokenize
 * exactly as the whole does, on random text rich in the cases that matter
 * (punctuation before line breaks, spaces, letters, digits, marks). */
Test(tok_llama3_split, cut_points_preserve_splits_of_both_patterns) {
    static const char *const pieces[] = {
        "a",    "Zb", " ",  "  ",    "\n",       "\r\n",     "\t",           ".",
        "!?",   "'s", "'T", "12345", "\xC2\xA0", "\xCC\x81", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
        "\xFF", "x"};
    uint64_t s = 0x9E3779B97F4A7C15ull;
    char text[600];
    size_t whole[700], left[700], right[700];
    for (int iter = 0; iter < 400; iter++) {
        size_t len = 0;
        while (len < 500) {
            const char *p = pieces[rng_next(&s) % (sizeof pieces / sizeof pieces[0])];
            memcpy(text + len, p, strlen(p));
            len += strlen(p);
        }
        for (int pat = 0; pat < 2; pat++) {
            size_t nw = split_pat(pat, text, len, whole, 700);
            size_t c = tri_tokenizer_cut_after(text, len, rng_next(&s) % len);
            if (c == len) continue;
            size_t nl = split_pat(pat, text, c, left, 700);
            size_t nr = split_pat(pat, text + c, len - c, right, 700);
            cr_assert_eq(nl + nr, nw, "pattern %d: a cut at %zu changes the number of pre-tokens", pat, c);
            for (size_t i = 0; i < nl; i++) cr_assert_eq(left[i], whole[i]);
            for (size_t i = 0; i < nr; i++) cr_assert_eq(right[i] + c, whole[nl + i]);
        }
    }
}
