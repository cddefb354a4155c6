/* model/ckpt/checkpoint.c: reading Hugging Face config.json texts as the
 * transformers versions write them (the round trip of our own config.json is
 * tests/model/test_llama.c; whole directories are tests/system/test_hf_import.c). */
#include <criterion/criterion.h>

#include <string.h>

#include "helpers/testutil.h"
#include "model/ckpt/checkpoint.h"

#define LLAMA_SIZES                                                                                            \
    "\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, " \
    "\"num_hidden_layers\": 2, \"max_position_embeddings\": 32, \"vocab_size\": 256, \"intermediate_size\": 96"

/* transformers 5 writes RoPE's numbers as one "rope_parameters" object (this
 * text is what its save_pretrained wrote for LlamaConfig(rope_theta=500,
 * rope_scaling=llama3)); 4.x wrote top-level rope_theta and rope_scaling. */
Test(checkpoint, transformers_5_rope_parameters_are_read) {
    tri_model_cfg c = {0};
    const char *v5 = "{" LLAMA_SIZES ", \"rope_parameters\": {\"factor\": 4.0, \"high_freq_factor\": 4.0, "
                     "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8, \"rope_theta\": 500.0, "
                     "\"rope_type\": \"llama3\"}, \"tie_word_embeddings\": false}";
    cr_assert_eq(tri_hf_config_parse(v5, "config.json", &c), 0);
    cr_expect(c.rope_theta == 500 && c.rope_scaling_factor == 4 && c.rope_low_freq_factor == 1 &&
              c.rope_high_freq_factor == 4 && c.rope_original_seq_len == 8 && c.n_kv_head == 2);
    /* "default": no scaling, the base from rope_parameters */
    tri_model_cfg d = {0};
    const char *plain = "{" LLAMA_SIZES ", \"rope_parameters\": {\"rope_theta\": 123.0, \"rope_type\": \"default\"}}";
    cr_assert_eq(tri_hf_config_parse(plain, "config.json", &d), 0);
    cr_expect(d.rope_theta == 123 && d.rope_scaling_factor == 0);
    /* the 4.x keys, when present, are the ones read */
    tri_model_cfg e = {0};
    const char *old = "{" LLAMA_SIZES ", \"rope_theta\": 777.0, \"rope_scaling\": null}";
    cr_assert_eq(tri_hf_config_parse(old, "config.json", &e), 0);
    cr_expect(e.rope_theta == 777 && e.rope_scaling_factor == 0);
    /* a kind Trident does not implement is refused by name, wherever it is written */
    char err[512];
    const char *yarn = "{" LLAMA_SIZES ", \"rope_parameters\": {\"rope_theta\": 1e4, \"rope_type\": \"yarn\", "
                       "\"factor\": 2.0}}";
    tri_model_cfg f = {0};
    tt_err_capture(err, sizeof err);
    int rc = tri_hf_config_parse(yarn, "config.json", &f);
    tt_err_capture(NULL, 0);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "yarn") != NULL, "%s", err);
}
