/* The model's shape, as the config file gives it. */
#ifndef TRI_MODEL_CONFIG_H
#define TRI_MODEL_CONFIG_H

typedef struct tri_model_cfg {
    int n_layer;    /* transformer blocks                                  */
    int n_head;     /* attention heads                                     */
    int n_embd;     /* channels C (n_embd % n_head == 0)                   */
    int seq_len;    /* context T (also the position-embedding rows)        */
    int vocab_size; /* real vocabulary V; padded to a multiple of 128 * tp */
} tri_model_cfg;

#endif
