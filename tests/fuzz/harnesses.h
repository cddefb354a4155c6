/* The harnesses of tests/fuzz, one entry each: fuzz_<name>.c, corpus
 * directory corpus/<name>/. The build compiles each twice: as a libFuzzer
 * program fuzz_<name> (TRI_FUZZ=ON, clang) and, with its entry point renamed
 * tri_fuzz_one_<name>, into the corpus replay test tri_fuzz_corpus. */
#define TRI_FUZZ_HARNESSES(X) \
    X(safetensors)            \
    X(tokens_llmc)            \
    X(tokens_megatron)        \
    X(config)                 \
    X(tokenizer_json)         \
    X(tokenizer_gpt2)         \
    X(ckpt_store)             \
    X(ckpt_state)             \
    X(hf_config)              \
    X(blend)
