/* Small JSON helpers shared by every reader and writer of JSON (configs,
 * sweep files, checkpoints' manifests and headers, tokenizers, --json
 * output). Parsing itself is cJSON's. */
#ifndef TRI_BASE_JSON_H
#define TRI_BASE_JSON_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* "a number", "a string", "true", "false", "null", "an array", "an object":
 * what a value is, for messages ("expected an integer, got a string"). */
const char *tri_json_kind(const cJSON *item);

/* A JSON number that is an exact non-negative integer below 2^53 (the
 * largest range a JSON number keeps exactly) into *v: 0, else -1 (*v
 * untouched). */
int tri_json_uint(const cJSON *item, uint64_t *v);

/* Writes s as a JSON string literal: '"' and '\\' escaped, control bytes as
 * \\u00XX, everything else (UTF-8 included) as it is. */
void tri_json_fputs(FILE *f, const char *s);

/* The same literal in a malloc'd string (NULL when out of memory). */
char *tri_json_quote(const char *s);

#endif
