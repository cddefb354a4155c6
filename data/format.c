/* The token dtypes and format names (data/format.h). */
#include "data/format.h"

int tri_dtype_bytes(int dtype) {
    switch (dtype) {
    case TRI_DT_U8:
    case TRI_DT_I8: return 1;
    case TRI_DT_I16:
    case TRI_DT_U16: return 2;
    case TRI_DT_I32:
    case TRI_DT_U32: return 4;
    case TRI_DT_I64: return 8;
    default: return 0;
    }
}

int64_t tri_dtype_max(int dtype) {
    switch (dtype) {
    case TRI_DT_U8: return UINT8_MAX;
    case TRI_DT_I8: return INT8_MAX;
    case TRI_DT_I16: return INT16_MAX;
    case TRI_DT_U16: return UINT16_MAX;
    case TRI_DT_I32: return INT32_MAX;
    case TRI_DT_U32: return UINT32_MAX;
    case TRI_DT_I64: return INT64_MAX;
    default: return 0;
    }
}

const char *tri_dtype_name(int dtype) {
    switch (dtype) {
    case TRI_DT_U8: return "uint8";
    case TRI_DT_I8: return "int8";
    case TRI_DT_I16: return "int16";
    case TRI_DT_I32: return "int32";
    case TRI_DT_I64: return "int64";
    case TRI_DT_F64: return "float64";
    case TRI_DT_F32: return "float32";
    case TRI_DT_U16: return "uint16";
    case TRI_DT_U32: return "uint32";
    default: return "unknown";
    }
}

const char *tri_data_format_name(int format) {
    switch (format) {
    case TRI_DATA_LLMC: return "llm.c";
    case TRI_DATA_MEGATRON: return "megatron";
    default: return "unknown";
    }
}
