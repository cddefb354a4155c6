/* Element types of tensors and messages. Shared by the op interface, the
 * parameter and activation layouts (model/) and the comm interface. */
#ifndef TRI_DTYPE_H
#define TRI_DTYPE_H

#include <stddef.h>

typedef enum {
    TRI_F32 = 0,
    TRI_F64 = 1,
    TRI_I32 = 2,
    TRI_U8 = 3,
    TRI_BF16 = 4, /* bfloat16: 1 sign, 8 exponent, 7 mantissa bits */
    TRI_F16 = 5,  /* IEEE half */
} tri_dtype;

/* Bytes per element. */
size_t tri_dtype_size(tri_dtype t);

#endif
