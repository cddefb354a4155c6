/* The model's shape, as the config file gives it. */
#ifndef TRI_MODEL_CONFIG_H
#define TRI_MODEL_CONFIG_H

/* The architecture (model.arch). GPT-2: LayerNorm, learned positions, GELU
 * MLP, biases, tied embeddings. Llama: RMSNorm, RoPE, SwiGLU MLP, grouped-
 * query attention, no biases, an LM head of its own unless tied. */
typedef enum { TRI_ARCH_GPT2 = 0, TRI_ARCH_LLAMA = 1 } tri_arch;

typedef struct tri_model_cfg {
    int n_layer;    /* transformer blocks                                  */
    int n_head;     /* attention heads                                     */
    int n_embd;     /* channels C (n_embd % n_head == 0)                   */
    int seq_len;    /* context T (also the position-embedding rows)        */
    int vocab_size; /* real vocabulary V; padded to a multiple of 128 * tp */
    /* Llama only (a zero-filled struct is a GPT-2, and for Llama a zero
     * means "the default", see tri_model_resolved in model/gpt.h) */
    tri_arch arch;
    int n_kv_head;       /* key/value heads (0: n_head); n_head % n_kv_head == 0 */
    int ffn_hidden;      /* SwiGLU width F (0: 2/3 4C rounded up to ffn_multiple_of) */
    int ffn_multiple_of; /* 0: 256                                            */
    int tie_embeddings;  /* 1: the LM head is the token embedding; 0 or -1: not
                            (GPT-2 is always tied)                            */
    double norm_eps;     /* RMSNorm epsilon (0: 1e-5)                         */
    double rope_theta;   /* RoPE base (0: 10000)                              */
    /* Llama 3.1 RoPE frequency scaling, off when rope_scaling_factor is 0 */
    double rope_scaling_factor;
    double rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_seq_len;
} tri_model_cfg;

#endif
