/* base/json: the kinds named in messages, exact integers below 2^53, and
 * string literals read back by cJSON (an independent parser). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "helpers/testutil.h"

Test(json, kinds_are_named_as_messages_say_them) {
    static const struct {
        const char *text, *kind;
    } cases[] = {{"1.5", "a number"}, {"\"x\"", "a string"}, {"true", "true"},         {"false", "false"},
                 {"null", "null"},    {"[1]", "an array"},   {"{\"a\":1}", "an object"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *j = cJSON_Parse(cases[k].text);
        cr_assert_str_eq(tri_json_kind(j), cases[k].kind, "%s", cases[k].text);
        cJSON_Delete(j);
    }
}

Test(json, uint_takes_exact_integers_below_two_to_the_53) {
    static const struct {
        const char *text;
        int ok;
        uint64_t v;
    } cases[] = {{"0", 1, 0},
                 {"42", 1, 42},
                 {"9007199254740991", 1, 9007199254740991ULL},
                 {"9007199254740992", 0, 0},
                 {"-1", 0, 0},
                 {"1.5", 0, 0},
                 {"1e300", 0, 0},
                 {"\"3\"", 0, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *j = cJSON_Parse(cases[k].text);
        uint64_t v = 777;
        int rc = tri_json_uint(j, &v);
        cr_assert_eq(rc == 0, cases[k].ok, "%s", cases[k].text);
        cr_assert_eq(v, cases[k].ok ? cases[k].v : 777, "%s", cases[k].text);
        cJSON_Delete(j);
    }
}

Test(json, quoted_strings_parse_back_to_themselves) {
    const char *s = "a \"q\" \\ tab\t nl\n bell\x07 caf\xc3\xa9 end";
    char *q = tri_json_quote(s);
    cr_assert_str_eq(q, "\"a \\\"q\\\" \\\\ tab\\u0009 nl\\u000a bell\\u0007 caf\xc3\xa9 end\"");
    cJSON *j = cJSON_Parse(q);
    cr_assert(cJSON_IsString(j));
    cr_assert_str_eq(j->valuestring, s);
    cJSON_Delete(j);
    /* the FILE version writes the same bytes */
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/q", dir);
    FILE *f = fopen(path, "w");
    tri_json_fputs(f, s);
    fclose(f);
    char *back = tt_read(path);
    cr_assert_str_eq(back, q);
    free(back);
    free(q);
    tt_rmrf(dir);
    free(dir);
}
