/* Element sizes (kernels/dtype.h). A file of its own, with no state and no
 * dependency beyond src/base, so that the CUDA module (libtri_cuda.so, see
 * CMakeLists.txt) can carry a copy of it. */
#include "kernels/dtype.h"

#include "base/err.h"

size_t tri_dtype_size(tri_dtype t) {
    switch (t) {
    case TRI_F32: return 4;
    case TRI_F64: return 8;
    case TRI_I32: return 4;
    case TRI_U8: return 1;
    case TRI_BF16: return 2;
    case TRI_F16: return 2;
    }
    TRI_FAIL("unknown dtype %d", (int)t);
}
