/* Byte-level BPE tokenizer: pre-tokenizer, word-level BPE, encode/decode,
 * tokenizer.json / vocab.json + merges.txt loading and saving. Training is
 * in data/tok/train.c; reading text files in data/text.c. */
#include "data/tok/tokenizer.h"

#include "data/bytemap.h"
#include "data/hash.h"
#include "base/file.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Unicode classes ----------------------------------------------------- */

enum { CO = 0, CL = 1, CN = 2, CW = 3 }; /* other, letter, number, white space */

typedef struct urange {
    uint32_t first, last;
    uint32_t cls;
} urange;

/* Non-ASCII code points of general category L* (CL) or N* (CN), Unicode 16.0,
 * sorted. Generated with Python's unicodedata2 16.0.0 (docs/tokenizer.md has the
 * script); everything not listed is CO unless it is white space. */
static const urange k_ranges[] = {
    {0x00AA, 0x00AA, CL},   {0x00B2, 0x00B3, CN},   {0x00B5, 0x00B5, CL},   {0x00B9, 0x00B9, CN},
    {0x00BA, 0x00BA, CL},   {0x00BC, 0x00BE, CN},   {0x00C0, 0x00D6, CL},   {0x00D8, 0x00F6, CL},
    {0x00F8, 0x02C1, CL},   {0x02C6, 0x02D1, CL},   {0x02E0, 0x02E4, CL},   {0x02EC, 0x02EC, CL},
    {0x02EE, 0x02EE, CL},   {0x0370, 0x0374, CL},   {0x0376, 0x0377, CL},   {0x037A, 0x037D, CL},
    {0x037F, 0x037F, CL},   {0x0386, 0x0386, CL},   {0x0388, 0x038A, CL},   {0x038C, 0x038C, CL},
    {0x038E, 0x03A1, CL},   {0x03A3, 0x03F5, CL},   {0x03F7, 0x0481, CL},   {0x048A, 0x052F, CL},
    {0x0531, 0x0556, CL},   {0x0559, 0x0559, CL},   {0x0560, 0x0588, CL},   {0x05D0, 0x05EA, CL},
    {0x05EF, 0x05F2, CL},   {0x0620, 0x064A, CL},   {0x0660, 0x0669, CN},   {0x066E, 0x066F, CL},
    {0x0671, 0x06D3, CL},   {0x06D5, 0x06D5, CL},   {0x06E5, 0x06E6, CL},   {0x06EE, 0x06EF, CL},
    {0x06F0, 0x06F9, CN},   {0x06FA, 0x06FC, CL},   {0x06FF, 0x06FF, CL},   {0x0710, 0x0710, CL},
    {0x0712, 0x072F, CL},   {0x074D, 0x07A5, CL},   {0x07B1, 0x07B1, CL},   {0x07C0, 0x07C9, CN},
    {0x07CA, 0x07EA, CL},   {0x07F4, 0x07F5, CL},   {0x07FA, 0x07FA, CL},   {0x0800, 0x0815, CL},
    {0x081A, 0x081A, CL},   {0x0824, 0x0824, CL},   {0x0828, 0x0828, CL},   {0x0840, 0x0858, CL},
    {0x0860, 0x086A, CL},   {0x0870, 0x0887, CL},   {0x0889, 0x088E, CL},   {0x08A0, 0x08C9, CL},
    {0x0904, 0x0939, CL},   {0x093D, 0x093D, CL},   {0x0950, 0x0950, CL},   {0x0958, 0x0961, CL},
    {0x0966, 0x096F, CN},   {0x0971, 0x0980, CL},   {0x0985, 0x098C, CL},   {0x098F, 0x0990, CL},
    {0x0993, 0x09A8, CL},   {0x09AA, 0x09B0, CL},   {0x09B2, 0x09B2, CL},   {0x09B6, 0x09B9, CL},
    {0x09BD, 0x09BD, CL},   {0x09CE, 0x09CE, CL},   {0x09DC, 0x09DD, CL},   {0x09DF, 0x09E1, CL},
    {0x09E6, 0x09EF, CN},   {0x09F0, 0x09F1, CL},   {0x09F4, 0x09F9, CN},   {0x09FC, 0x09FC, CL},
    {0x0A05, 0x0A0A, CL},   {0x0A0F, 0x0A10, CL},   {0x0A13, 0x0A28, CL},   {0x0A2A, 0x0A30, CL},
    {0x0A32, 0x0A33, CL},   {0x0A35, 0x0A36, CL},   {0x0A38, 0x0A39, CL},   {0x0A59, 0x0A5C, CL},
    {0x0A5E, 0x0A5E, CL},   {0x0A66, 0x0A6F, CN},   {0x0A72, 0x0A74, CL},   {0x0A85, 0x0A8D, CL},
    {0x0A8F, 0x0A91, CL},   {0x0A93, 0x0AA8, CL},   {0x0AAA, 0x0AB0, CL},   {0x0AB2, 0x0AB3, CL},
    {0x0AB5, 0x0AB9, CL},   {0x0ABD, 0x0ABD, CL},   {0x0AD0, 0x0AD0, CL},   {0x0AE0, 0x0AE1, CL},
    {0x0AE6, 0x0AEF, CN},   {0x0AF9, 0x0AF9, CL},   {0x0B05, 0x0B0C, CL},   {0x0B0F, 0x0B10, CL},
    {0x0B13, 0x0B28, CL},   {0x0B2A, 0x0B30, CL},   {0x0B32, 0x0B33, CL},   {0x0B35, 0x0B39, CL},
    {0x0B3D, 0x0B3D, CL},   {0x0B5C, 0x0B5D, CL},   {0x0B5F, 0x0B61, CL},   {0x0B66, 0x0B6F, CN},
    {0x0B71, 0x0B71, CL},   {0x0B72, 0x0B77, CN},   {0x0B83, 0x0B83, CL},   {0x0B85, 0x0B8A, CL},
    {0x0B8E, 0x0B90, CL},   {0x0B92, 0x0B95, CL},   {0x0B99, 0x0B9A, CL},   {0x0B9C, 0x0B9C, CL},
    {0x0B9E, 0x0B9F, CL},   {0x0BA3, 0x0BA4, CL},   {0x0BA8, 0x0BAA, CL},   {0x0BAE, 0x0BB9, CL},
    {0x0BD0, 0x0BD0, CL},   {0x0BE6, 0x0BF2, CN},   {0x0C05, 0x0C0C, CL},   {0x0C0E, 0x0C10, CL},
    {0x0C12, 0x0C28, CL},   {0x0C2A, 0x0C39, CL},   {0x0C3D, 0x0C3D, CL},   {0x0C58, 0x0C5A, CL},
    {0x0C5D, 0x0C5D, CL},   {0x0C60, 0x0C61, CL},   {0x0C66, 0x0C6F, CN},   {0x0C78, 0x0C7E, CN},
    {0x0C80, 0x0C80, CL},   {0x0C85, 0x0C8C, CL},   {0x0C8E, 0x0C90, CL},   {0x0C92, 0x0CA8, CL},
    {0x0CAA, 0x0CB3, CL},   {0x0CB5, 0x0CB9, CL},   {0x0CBD, 0x0CBD, CL},   {0x0CDD, 0x0CDE, CL},
    {0x0CE0, 0x0CE1, CL},   {0x0CE6, 0x0CEF, CN},   {0x0CF1, 0x0CF2, CL},   {0x0D04, 0x0D0C, CL},
    {0x0D0E, 0x0D10, CL},   {0x0D12, 0x0D3A, CL},   {0x0D3D, 0x0D3D, CL},   {0x0D4E, 0x0D4E, CL},
    {0x0D54, 0x0D56, CL},   {0x0D58, 0x0D5E, CN},   {0x0D5F, 0x0D61, CL},   {0x0D66, 0x0D78, CN},
    {0x0D7A, 0x0D7F, CL},   {0x0D85, 0x0D96, CL},   {0x0D9A, 0x0DB1, CL},   {0x0DB3, 0x0DBB, CL},
    {0x0DBD, 0x0DBD, CL},   {0x0DC0, 0x0DC6, CL},   {0x0DE6, 0x0DEF, CN},   {0x0E01, 0x0E30, CL},
    {0x0E32, 0x0E33, CL},   {0x0E40, 0x0E46, CL},   {0x0E50, 0x0E59, CN},   {0x0E81, 0x0E82, CL},
    {0x0E84, 0x0E84, CL},   {0x0E86, 0x0E8A, CL},   {0x0E8C, 0x0EA3, CL},   {0x0EA5, 0x0EA5, CL},
    {0x0EA7, 0x0EB0, CL},   {0x0EB2, 0x0EB3, CL},   {0x0EBD, 0x0EBD, CL},   {0x0EC0, 0x0EC4, CL},
    {0x0EC6, 0x0EC6, CL},   {0x0ED0, 0x0ED9, CN},   {0x0EDC, 0x0EDF, CL},   {0x0F00, 0x0F00, CL},
    {0x0F20, 0x0F33, CN},   {0x0F40, 0x0F47, CL},   {0x0F49, 0x0F6C, CL},   {0x0F88, 0x0F8C, CL},
    {0x1000, 0x102A, CL},   {0x103F, 0x103F, CL},   {0x1040, 0x1049, CN},   {0x1050, 0x1055, CL},
    {0x105A, 0x105D, CL},   {0x1061, 0x1061, CL},   {0x1065, 0x1066, CL},   {0x106E, 0x1070, CL},
    {0x1075, 0x1081, CL},   {0x108E, 0x108E, CL},   {0x1090, 0x1099, CN},   {0x10A0, 0x10C5, CL},
    {0x10C7, 0x10C7, CL},   {0x10CD, 0x10CD, CL},   {0x10D0, 0x10FA, CL},   {0x10FC, 0x1248, CL},
    {0x124A, 0x124D, CL},   {0x1250, 0x1256, CL},   {0x1258, 0x1258, CL},   {0x125A, 0x125D, CL},
    {0x1260, 0x1288, CL},   {0x128A, 0x128D, CL},   {0x1290, 0x12B0, CL},   {0x12B2, 0x12B5, CL},
    {0x12B8, 0x12BE, CL},   {0x12C0, 0x12C0, CL},   {0x12C2, 0x12C5, CL},   {0x12C8, 0x12D6, CL},
    {0x12D8, 0x1310, CL},   {0x1312, 0x1315, CL},   {0x1318, 0x135A, CL},   {0x1369, 0x137C, CN},
    {0x1380, 0x138F, CL},   {0x13A0, 0x13F5, CL},   {0x13F8, 0x13FD, CL},   {0x1401, 0x166C, CL},
    {0x166F, 0x167F, CL},   {0x1681, 0x169A, CL},   {0x16A0, 0x16EA, CL},   {0x16EE, 0x16F0, CN},
    {0x16F1, 0x16F8, CL},   {0x1700, 0x1711, CL},   {0x171F, 0x1731, CL},   {0x1740, 0x1751, CL},
    {0x1760, 0x176C, CL},   {0x176E, 0x1770, CL},   {0x1780, 0x17B3, CL},   {0x17D7, 0x17D7, CL},
    {0x17DC, 0x17DC, CL},   {0x17E0, 0x17E9, CN},   {0x17F0, 0x17F9, CN},   {0x1810, 0x1819, CN},
    {0x1820, 0x1878, CL},   {0x1880, 0x1884, CL},   {0x1887, 0x18A8, CL},   {0x18AA, 0x18AA, CL},
    {0x18B0, 0x18F5, CL},   {0x1900, 0x191E, CL},   {0x1946, 0x194F, CN},   {0x1950, 0x196D, CL},
    {0x1970, 0x1974, CL},   {0x1980, 0x19AB, CL},   {0x19B0, 0x19C9, CL},   {0x19D0, 0x19DA, CN},
    {0x1A00, 0x1A16, CL},   {0x1A20, 0x1A54, CL},   {0x1A80, 0x1A89, CN},   {0x1A90, 0x1A99, CN},
    {0x1AA7, 0x1AA7, CL},   {0x1B05, 0x1B33, CL},   {0x1B45, 0x1B4C, CL},   {0x1B50, 0x1B59, CN},
    {0x1B83, 0x1BA0, CL},   {0x1BAE, 0x1BAF, CL},   {0x1BB0, 0x1BB9, CN},   {0x1BBA, 0x1BE5, CL},
    {0x1C00, 0x1C23, CL},   {0x1C40, 0x1C49, CN},   {0x1C4D, 0x1C4F, CL},   {0x1C50, 0x1C59, CN},
    {0x1C5A, 0x1C7D, CL},   {0x1C80, 0x1C8A, CL},   {0x1C90, 0x1CBA, CL},   {0x1CBD, 0x1CBF, CL},
    {0x1CE9, 0x1CEC, CL},   {0x1CEE, 0x1CF3, CL},   {0x1CF5, 0x1CF6, CL},   {0x1CFA, 0x1CFA, CL},
    {0x1D00, 0x1DBF, CL},   {0x1E00, 0x1F15, CL},   {0x1F18, 0x1F1D, CL},   {0x1F20, 0x1F45, CL},
    {0x1F48, 0x1F4D, CL},   {0x1F50, 0x1F57, CL},   {0x1F59, 0x1F59, CL},   {0x1F5B, 0x1F5B, CL},
    {0x1F5D, 0x1F5D, CL},   {0x1F5F, 0x1F7D, CL},   {0x1F80, 0x1FB4, CL},   {0x1FB6, 0x1FBC, CL},
    {0x1FBE, 0x1FBE, CL},   {0x1FC2, 0x1FC4, CL},   {0x1FC6, 0x1FCC, CL},   {0x1FD0, 0x1FD3, CL},
    {0x1FD6, 0x1FDB, CL},   {0x1FE0, 0x1FEC, CL},   {0x1FF2, 0x1FF4, CL},   {0x1FF6, 0x1FFC, CL},
    {0x2070, 0x2070, CN},   {0x2071, 0x2071, CL},   {0x2074, 0x2079, CN},   {0x207F, 0x207F, CL},
    {0x2080, 0x2089, CN},   {0x2090, 0x209C, CL},   {0x2102, 0x2102, CL},   {0x2107, 0x2107, CL},
    {0x210A, 0x2113, CL},   {0x2115, 0x2115, CL},   {0x2119, 0x211D, CL},   {0x2124, 0x2124, CL},
    {0x2126, 0x2126, CL},   {0x2128, 0x2128, CL},   {0x212A, 0x212D, CL},   {0x212F, 0x2139, CL},
    {0x213C, 0x213F, CL},   {0x2145, 0x2149, CL},   {0x214E, 0x214E, CL},   {0x2150, 0x2182, CN},
    {0x2183, 0x2184, CL},   {0x2185, 0x2189, CN},   {0x2460, 0x249B, CN},   {0x24EA, 0x24FF, CN},
    {0x2776, 0x2793, CN},   {0x2C00, 0x2CE4, CL},   {0x2CEB, 0x2CEE, CL},   {0x2CF2, 0x2CF3, CL},
    {0x2CFD, 0x2CFD, CN},   {0x2D00, 0x2D25, CL},   {0x2D27, 0x2D27, CL},   {0x2D2D, 0x2D2D, CL},
    {0x2D30, 0x2D67, CL},   {0x2D6F, 0x2D6F, CL},   {0x2D80, 0x2D96, CL},   {0x2DA0, 0x2DA6, CL},
    {0x2DA8, 0x2DAE, CL},   {0x2DB0, 0x2DB6, CL},   {0x2DB8, 0x2DBE, CL},   {0x2DC0, 0x2DC6, CL},
    {0x2DC8, 0x2DCE, CL},   {0x2DD0, 0x2DD6, CL},   {0x2DD8, 0x2DDE, CL},   {0x2E2F, 0x2E2F, CL},
    {0x3005, 0x3006, CL},   {0x3007, 0x3007, CN},   {0x3021, 0x3029, CN},   {0x3031, 0x3035, CL},
    {0x3038, 0x303A, CN},   {0x303B, 0x303C, CL},   {0x3041, 0x3096, CL},   {0x309D, 0x309F, CL},
    {0x30A1, 0x30FA, CL},   {0x30FC, 0x30FF, CL},   {0x3105, 0x312F, CL},   {0x3131, 0x318E, CL},
    {0x3192, 0x3195, CN},   {0x31A0, 0x31BF, CL},   {0x31F0, 0x31FF, CL},   {0x3220, 0x3229, CN},
    {0x3248, 0x324F, CN},   {0x3251, 0x325F, CN},   {0x3280, 0x3289, CN},   {0x32B1, 0x32BF, CN},
    {0x3400, 0x4DBF, CL},   {0x4E00, 0xA48C, CL},   {0xA4D0, 0xA4FD, CL},   {0xA500, 0xA60C, CL},
    {0xA610, 0xA61F, CL},   {0xA620, 0xA629, CN},   {0xA62A, 0xA62B, CL},   {0xA640, 0xA66E, CL},
    {0xA67F, 0xA69D, CL},   {0xA6A0, 0xA6E5, CL},   {0xA6E6, 0xA6EF, CN},   {0xA717, 0xA71F, CL},
    {0xA722, 0xA788, CL},   {0xA78B, 0xA7CD, CL},   {0xA7D0, 0xA7D1, CL},   {0xA7D3, 0xA7D3, CL},
    {0xA7D5, 0xA7DC, CL},   {0xA7F2, 0xA801, CL},   {0xA803, 0xA805, CL},   {0xA807, 0xA80A, CL},
    {0xA80C, 0xA822, CL},   {0xA830, 0xA835, CN},   {0xA840, 0xA873, CL},   {0xA882, 0xA8B3, CL},
    {0xA8D0, 0xA8D9, CN},   {0xA8F2, 0xA8F7, CL},   {0xA8FB, 0xA8FB, CL},   {0xA8FD, 0xA8FE, CL},
    {0xA900, 0xA909, CN},   {0xA90A, 0xA925, CL},   {0xA930, 0xA946, CL},   {0xA960, 0xA97C, CL},
    {0xA984, 0xA9B2, CL},   {0xA9CF, 0xA9CF, CL},   {0xA9D0, 0xA9D9, CN},   {0xA9E0, 0xA9E4, CL},
    {0xA9E6, 0xA9EF, CL},   {0xA9F0, 0xA9F9, CN},   {0xA9FA, 0xA9FE, CL},   {0xAA00, 0xAA28, CL},
    {0xAA40, 0xAA42, CL},   {0xAA44, 0xAA4B, CL},   {0xAA50, 0xAA59, CN},   {0xAA60, 0xAA76, CL},
    {0xAA7A, 0xAA7A, CL},   {0xAA7E, 0xAAAF, CL},   {0xAAB1, 0xAAB1, CL},   {0xAAB5, 0xAAB6, CL},
    {0xAAB9, 0xAABD, CL},   {0xAAC0, 0xAAC0, CL},   {0xAAC2, 0xAAC2, CL},   {0xAADB, 0xAADD, CL},
    {0xAAE0, 0xAAEA, CL},   {0xAAF2, 0xAAF4, CL},   {0xAB01, 0xAB06, CL},   {0xAB09, 0xAB0E, CL},
    {0xAB11, 0xAB16, CL},   {0xAB20, 0xAB26, CL},   {0xAB28, 0xAB2E, CL},   {0xAB30, 0xAB5A, CL},
    {0xAB5C, 0xAB69, CL},   {0xAB70, 0xABE2, CL},   {0xABF0, 0xABF9, CN},   {0xAC00, 0xD7A3, CL},
    {0xD7B0, 0xD7C6, CL},   {0xD7CB, 0xD7FB, CL},   {0xF900, 0xFA6D, CL},   {0xFA70, 0xFAD9, CL},
    {0xFB00, 0xFB06, CL},   {0xFB13, 0xFB17, CL},   {0xFB1D, 0xFB1D, CL},   {0xFB1F, 0xFB28, CL},
    {0xFB2A, 0xFB36, CL},   {0xFB38, 0xFB3C, CL},   {0xFB3E, 0xFB3E, CL},   {0xFB40, 0xFB41, CL},
    {0xFB43, 0xFB44, CL},   {0xFB46, 0xFBB1, CL},   {0xFBD3, 0xFD3D, CL},   {0xFD50, 0xFD8F, CL},
    {0xFD92, 0xFDC7, CL},   {0xFDF0, 0xFDFB, CL},   {0xFE70, 0xFE74, CL},   {0xFE76, 0xFEFC, CL},
    {0xFF10, 0xFF19, CN},   {0xFF21, 0xFF3A, CL},   {0xFF41, 0xFF5A, CL},   {0xFF66, 0xFFBE, CL},
    {0xFFC2, 0xFFC7, CL},   {0xFFCA, 0xFFCF, CL},   {0xFFD2, 0xFFD7, CL},   {0xFFDA, 0xFFDC, CL},
    {0x10000, 0x1000B, CL}, {0x1000D, 0x10026, CL}, {0x10028, 0x1003A, CL}, {0x1003C, 0x1003D, CL},
    {0x1003F, 0x1004D, CL}, {0x10050, 0x1005D, CL}, {0x10080, 0x100FA, CL}, {0x10107, 0x10133, CN},
    {0x10140, 0x10178, CN}, {0x1018A, 0x1018B, CN}, {0x10280, 0x1029C, CL}, {0x102A0, 0x102D0, CL},
    {0x102E1, 0x102FB, CN}, {0x10300, 0x1031F, CL}, {0x10320, 0x10323, CN}, {0x1032D, 0x10340, CL},
    {0x10341, 0x10341, CN}, {0x10342, 0x10349, CL}, {0x1034A, 0x1034A, CN}, {0x10350, 0x10375, CL},
    {0x10380, 0x1039D, CL}, {0x103A0, 0x103C3, CL}, {0x103C8, 0x103CF, CL}, {0x103D1, 0x103D5, CN},
    {0x10400, 0x1049D, CL}, {0x104A0, 0x104A9, CN}, {0x104B0, 0x104D3, CL}, {0x104D8, 0x104FB, CL},
    {0x10500, 0x10527, CL}, {0x10530, 0x10563, CL}, {0x10570, 0x1057A, CL}, {0x1057C, 0x1058A, CL},
    {0x1058C, 0x10592, CL}, {0x10594, 0x10595, CL}, {0x10597, 0x105A1, CL}, {0x105A3, 0x105B1, CL},
    {0x105B3, 0x105B9, CL}, {0x105BB, 0x105BC, CL}, {0x105C0, 0x105F3, CL}, {0x10600, 0x10736, CL},
    {0x10740, 0x10755, CL}, {0x10760, 0x10767, CL}, {0x10780, 0x10785, CL}, {0x10787, 0x107B0, CL},
    {0x107B2, 0x107BA, CL}, {0x10800, 0x10805, CL}, {0x10808, 0x10808, CL}, {0x1080A, 0x10835, CL},
    {0x10837, 0x10838, CL}, {0x1083C, 0x1083C, CL}, {0x1083F, 0x10855, CL}, {0x10858, 0x1085F, CN},
    {0x10860, 0x10876, CL}, {0x10879, 0x1087F, CN}, {0x10880, 0x1089E, CL}, {0x108A7, 0x108AF, CN},
    {0x108E0, 0x108F2, CL}, {0x108F4, 0x108F5, CL}, {0x108FB, 0x108FF, CN}, {0x10900, 0x10915, CL},
    {0x10916, 0x1091B, CN}, {0x10920, 0x10939, CL}, {0x10980, 0x109B7, CL}, {0x109BC, 0x109BD, CN},
    {0x109BE, 0x109BF, CL}, {0x109C0, 0x109CF, CN}, {0x109D2, 0x109FF, CN}, {0x10A00, 0x10A00, CL},
    {0x10A10, 0x10A13, CL}, {0x10A15, 0x10A17, CL}, {0x10A19, 0x10A35, CL}, {0x10A40, 0x10A48, CN},
    {0x10A60, 0x10A7C, CL}, {0x10A7D, 0x10A7E, CN}, {0x10A80, 0x10A9C, CL}, {0x10A9D, 0x10A9F, CN},
    {0x10AC0, 0x10AC7, CL}, {0x10AC9, 0x10AE4, CL}, {0x10AEB, 0x10AEF, CN}, {0x10B00, 0x10B35, CL},
    {0x10B40, 0x10B55, CL}, {0x10B58, 0x10B5F, CN}, {0x10B60, 0x10B72, CL}, {0x10B78, 0x10B7F, CN},
    {0x10B80, 0x10B91, CL}, {0x10BA9, 0x10BAF, CN}, {0x10C00, 0x10C48, CL}, {0x10C80, 0x10CB2, CL},
    {0x10CC0, 0x10CF2, CL}, {0x10CFA, 0x10CFF, CN}, {0x10D00, 0x10D23, CL}, {0x10D30, 0x10D39, CN},
    {0x10D40, 0x10D49, CN}, {0x10D4A, 0x10D65, CL}, {0x10D6F, 0x10D85, CL}, {0x10E60, 0x10E7E, CN},
    {0x10E80, 0x10EA9, CL}, {0x10EB0, 0x10EB1, CL}, {0x10EC2, 0x10EC4, CL}, {0x10F00, 0x10F1C, CL},
    {0x10F1D, 0x10F26, CN}, {0x10F27, 0x10F27, CL}, {0x10F30, 0x10F45, CL}, {0x10F51, 0x10F54, CN},
    {0x10F70, 0x10F81, CL}, {0x10FB0, 0x10FC4, CL}, {0x10FC5, 0x10FCB, CN}, {0x10FE0, 0x10FF6, CL},
    {0x11003, 0x11037, CL}, {0x11052, 0x1106F, CN}, {0x11071, 0x11072, CL}, {0x11075, 0x11075, CL},
    {0x11083, 0x110AF, CL}, {0x110D0, 0x110E8, CL}, {0x110F0, 0x110F9, CN}, {0x11103, 0x11126, CL},
    {0x11136, 0x1113F, CN}, {0x11144, 0x11144, CL}, {0x11147, 0x11147, CL}, {0x11150, 0x11172, CL},
    {0x11176, 0x11176, CL}, {0x11183, 0x111B2, CL}, {0x111C1, 0x111C4, CL}, {0x111D0, 0x111D9, CN},
    {0x111DA, 0x111DA, CL}, {0x111DC, 0x111DC, CL}, {0x111E1, 0x111F4, CN}, {0x11200, 0x11211, CL},
    {0x11213, 0x1122B, CL}, {0x1123F, 0x11240, CL}, {0x11280, 0x11286, CL}, {0x11288, 0x11288, CL},
    {0x1128A, 0x1128D, CL}, {0x1128F, 0x1129D, CL}, {0x1129F, 0x112A8, CL}, {0x112B0, 0x112DE, CL},
    {0x112F0, 0x112F9, CN}, {0x11305, 0x1130C, CL}, {0x1130F, 0x11310, CL}, {0x11313, 0x11328, CL},
    {0x1132A, 0x11330, CL}, {0x11332, 0x11333, CL}, {0x11335, 0x11339, CL}, {0x1133D, 0x1133D, CL},
    {0x11350, 0x11350, CL}, {0x1135D, 0x11361, CL}, {0x11380, 0x11389, CL}, {0x1138B, 0x1138B, CL},
    {0x1138E, 0x1138E, CL}, {0x11390, 0x113B5, CL}, {0x113B7, 0x113B7, CL}, {0x113D1, 0x113D1, CL},
    {0x113D3, 0x113D3, CL}, {0x11400, 0x11434, CL}, {0x11447, 0x1144A, CL}, {0x11450, 0x11459, CN},
    {0x1145F, 0x11461, CL}, {0x11480, 0x114AF, CL}, {0x114C4, 0x114C5, CL}, {0x114C7, 0x114C7, CL},
    {0x114D0, 0x114D9, CN}, {0x11580, 0x115AE, CL}, {0x115D8, 0x115DB, CL}, {0x11600, 0x1162F, CL},
    {0x11644, 0x11644, CL}, {0x11650, 0x11659, CN}, {0x11680, 0x116AA, CL}, {0x116B8, 0x116B8, CL},
    {0x116C0, 0x116C9, CN}, {0x116D0, 0x116E3, CN}, {0x11700, 0x1171A, CL}, {0x11730, 0x1173B, CN},
    {0x11740, 0x11746, CL}, {0x11800, 0x1182B, CL}, {0x118A0, 0x118DF, CL}, {0x118E0, 0x118F2, CN},
    {0x118FF, 0x11906, CL}, {0x11909, 0x11909, CL}, {0x1190C, 0x11913, CL}, {0x11915, 0x11916, CL},
    {0x11918, 0x1192F, CL}, {0x1193F, 0x1193F, CL}, {0x11941, 0x11941, CL}, {0x11950, 0x11959, CN},
    {0x119A0, 0x119A7, CL}, {0x119AA, 0x119D0, CL}, {0x119E1, 0x119E1, CL}, {0x119E3, 0x119E3, CL},
    {0x11A00, 0x11A00, CL}, {0x11A0B, 0x11A32, CL}, {0x11A3A, 0x11A3A, CL}, {0x11A50, 0x11A50, CL},
    {0x11A5C, 0x11A89, CL}, {0x11A9D, 0x11A9D, CL}, {0x11AB0, 0x11AF8, CL}, {0x11BC0, 0x11BE0, CL},
    {0x11BF0, 0x11BF9, CN}, {0x11C00, 0x11C08, CL}, {0x11C0A, 0x11C2E, CL}, {0x11C40, 0x11C40, CL},
    {0x11C50, 0x11C6C, CN}, {0x11C72, 0x11C8F, CL}, {0x11D00, 0x11D06, CL}, {0x11D08, 0x11D09, CL},
    {0x11D0B, 0x11D30, CL}, {0x11D46, 0x11D46, CL}, {0x11D50, 0x11D59, CN}, {0x11D60, 0x11D65, CL},
    {0x11D67, 0x11D68, CL}, {0x11D6A, 0x11D89, CL}, {0x11D98, 0x11D98, CL}, {0x11DA0, 0x11DA9, CN},
    {0x11EE0, 0x11EF2, CL}, {0x11F02, 0x11F02, CL}, {0x11F04, 0x11F10, CL}, {0x11F12, 0x11F33, CL},
    {0x11F50, 0x11F59, CN}, {0x11FB0, 0x11FB0, CL}, {0x11FC0, 0x11FD4, CN}, {0x12000, 0x12399, CL},
    {0x12400, 0x1246E, CN}, {0x12480, 0x12543, CL}, {0x12F90, 0x12FF0, CL}, {0x13000, 0x1342F, CL},
    {0x13441, 0x13446, CL}, {0x13460, 0x143FA, CL}, {0x14400, 0x14646, CL}, {0x16100, 0x1611D, CL},
    {0x16130, 0x16139, CN}, {0x16800, 0x16A38, CL}, {0x16A40, 0x16A5E, CL}, {0x16A60, 0x16A69, CN},
    {0x16A70, 0x16ABE, CL}, {0x16AC0, 0x16AC9, CN}, {0x16AD0, 0x16AED, CL}, {0x16B00, 0x16B2F, CL},
    {0x16B40, 0x16B43, CL}, {0x16B50, 0x16B59, CN}, {0x16B5B, 0x16B61, CN}, {0x16B63, 0x16B77, CL},
    {0x16B7D, 0x16B8F, CL}, {0x16D40, 0x16D6C, CL}, {0x16D70, 0x16D79, CN}, {0x16E40, 0x16E7F, CL},
    {0x16E80, 0x16E96, CN}, {0x16F00, 0x16F4A, CL}, {0x16F50, 0x16F50, CL}, {0x16F93, 0x16F9F, CL},
    {0x16FE0, 0x16FE1, CL}, {0x16FE3, 0x16FE3, CL}, {0x17000, 0x187F7, CL}, {0x18800, 0x18CD5, CL},
    {0x18CFF, 0x18D08, CL}, {0x1AFF0, 0x1AFF3, CL}, {0x1AFF5, 0x1AFFB, CL}, {0x1AFFD, 0x1AFFE, CL},
    {0x1B000, 0x1B122, CL}, {0x1B132, 0x1B132, CL}, {0x1B150, 0x1B152, CL}, {0x1B155, 0x1B155, CL},
    {0x1B164, 0x1B167, CL}, {0x1B170, 0x1B2FB, CL}, {0x1BC00, 0x1BC6A, CL}, {0x1BC70, 0x1BC7C, CL},
    {0x1BC80, 0x1BC88, CL}, {0x1BC90, 0x1BC99, CL}, {0x1CCF0, 0x1CCF9, CN}, {0x1D2C0, 0x1D2D3, CN},
    {0x1D2E0, 0x1D2F3, CN}, {0x1D360, 0x1D378, CN}, {0x1D400, 0x1D454, CL}, {0x1D456, 0x1D49C, CL},
    {0x1D49E, 0x1D49F, CL}, {0x1D4A2, 0x1D4A2, CL}, {0x1D4A5, 0x1D4A6, CL}, {0x1D4A9, 0x1D4AC, CL},
    {0x1D4AE, 0x1D4B9, CL}, {0x1D4BB, 0x1D4BB, CL}, {0x1D4BD, 0x1D4C3, CL}, {0x1D4C5, 0x1D505, CL},
    {0x1D507, 0x1D50A, CL}, {0x1D50D, 0x1D514, CL}, {0x1D516, 0x1D51C, CL}, {0x1D51E, 0x1D539, CL},
    {0x1D53B, 0x1D53E, CL}, {0x1D540, 0x1D544, CL}, {0x1D546, 0x1D546, CL}, {0x1D54A, 0x1D550, CL},
    {0x1D552, 0x1D6A5, CL}, {0x1D6A8, 0x1D6C0, CL}, {0x1D6C2, 0x1D6DA, CL}, {0x1D6DC, 0x1D6FA, CL},
    {0x1D6FC, 0x1D714, CL}, {0x1D716, 0x1D734, CL}, {0x1D736, 0x1D74E, CL}, {0x1D750, 0x1D76E, CL},
    {0x1D770, 0x1D788, CL}, {0x1D78A, 0x1D7A8, CL}, {0x1D7AA, 0x1D7C2, CL}, {0x1D7C4, 0x1D7CB, CL},
    {0x1D7CE, 0x1D7FF, CN}, {0x1DF00, 0x1DF1E, CL}, {0x1DF25, 0x1DF2A, CL}, {0x1E030, 0x1E06D, CL},
    {0x1E100, 0x1E12C, CL}, {0x1E137, 0x1E13D, CL}, {0x1E140, 0x1E149, CN}, {0x1E14E, 0x1E14E, CL},
    {0x1E290, 0x1E2AD, CL}, {0x1E2C0, 0x1E2EB, CL}, {0x1E2F0, 0x1E2F9, CN}, {0x1E4D0, 0x1E4EB, CL},
    {0x1E4F0, 0x1E4F9, CN}, {0x1E5D0, 0x1E5ED, CL}, {0x1E5F0, 0x1E5F0, CL}, {0x1E5F1, 0x1E5FA, CN},
    {0x1E7E0, 0x1E7E6, CL}, {0x1E7E8, 0x1E7EB, CL}, {0x1E7ED, 0x1E7EE, CL}, {0x1E7F0, 0x1E7FE, CL},
    {0x1E800, 0x1E8C4, CL}, {0x1E8C7, 0x1E8CF, CN}, {0x1E900, 0x1E943, CL}, {0x1E94B, 0x1E94B, CL},
    {0x1E950, 0x1E959, CN}, {0x1EC71, 0x1ECAB, CN}, {0x1ECAD, 0x1ECAF, CN}, {0x1ECB1, 0x1ECB4, CN},
    {0x1ED01, 0x1ED2D, CN}, {0x1ED2F, 0x1ED3D, CN}, {0x1EE00, 0x1EE03, CL}, {0x1EE05, 0x1EE1F, CL},
    {0x1EE21, 0x1EE22, CL}, {0x1EE24, 0x1EE24, CL}, {0x1EE27, 0x1EE27, CL}, {0x1EE29, 0x1EE32, CL},
    {0x1EE34, 0x1EE37, CL}, {0x1EE39, 0x1EE39, CL}, {0x1EE3B, 0x1EE3B, CL}, {0x1EE42, 0x1EE42, CL},
    {0x1EE47, 0x1EE47, CL}, {0x1EE49, 0x1EE49, CL}, {0x1EE4B, 0x1EE4B, CL}, {0x1EE4D, 0x1EE4F, CL},
    {0x1EE51, 0x1EE52, CL}, {0x1EE54, 0x1EE54, CL}, {0x1EE57, 0x1EE57, CL}, {0x1EE59, 0x1EE59, CL},
    {0x1EE5B, 0x1EE5B, CL}, {0x1EE5D, 0x1EE5D, CL}, {0x1EE5F, 0x1EE5F, CL}, {0x1EE61, 0x1EE62, CL},
    {0x1EE64, 0x1EE64, CL}, {0x1EE67, 0x1EE6A, CL}, {0x1EE6C, 0x1EE72, CL}, {0x1EE74, 0x1EE77, CL},
    {0x1EE79, 0x1EE7C, CL}, {0x1EE7E, 0x1EE7E, CL}, {0x1EE80, 0x1EE89, CL}, {0x1EE8B, 0x1EE9B, CL},
    {0x1EEA1, 0x1EEA3, CL}, {0x1EEA5, 0x1EEA9, CL}, {0x1EEAB, 0x1EEBB, CL}, {0x1F100, 0x1F10C, CN},
    {0x1FBF0, 0x1FBF9, CN}, {0x20000, 0x2A6DF, CL}, {0x2A700, 0x2B739, CL}, {0x2B740, 0x2B81D, CL},
    {0x2B820, 0x2CEA1, CL}, {0x2CEB0, 0x2EBE0, CL}, {0x2EBF0, 0x2EE5D, CL}, {0x2F800, 0x2FA1D, CL},
    {0x30000, 0x3134A, CL}, {0x31350, 0x323AF, CL},
};

#define INVALID_CP UINT32_MAX

static int char_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CL;
        if (cp >= '0' && cp <= '9') return CN;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CW;
        return CO;
    }
    if (cp == INVALID_CP) return CO;
    /* Unicode White_Space (PropList.txt) beyond ASCII */
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return CW;
    size_t lo = 0, hi = sizeof k_ranges / sizeof k_ranges[0];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < k_ranges[mid].first)
            hi = mid;
        else if (cp > k_ranges[mid].last)
            lo = mid + 1;
        else
            return (int)k_ranges[mid].cls;
    }
    return CO;
}

/* The character at s[i] (i < n): returns its length (1..4) and sets *cp, or
 * returns 1 with *cp = INVALID_CP for a byte that does not start a
 * well-formed UTF-8 sequence (Unicode Table 3-7) within s[i..n). */
static size_t utf8_next(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t b0 = s[i];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        v = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        v = b0 & 0x0Fu;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        v = b0 & 0x07u;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        *cp = INVALID_CP;
        return 1;
    }
    if (n - i <= need) {
        *cp = INVALID_CP;
        return 1;
    }
    for (size_t k = 1; k <= need; k++) {
        uint8_t b = s[i + k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *cp = INVALID_CP;
            return 1;
        }
        v = (v << 6) | (b & 0x3Fu);
    }
    *cp = v;
    return need + 1;
}

static size_t class_at(const uint8_t *s, size_t n, size_t i, int *cls) {
    uint32_t cp;
    size_t w = utf8_next(s, n, i, &cp);
    *cls = char_class(cp);
    return w;
}

/* ---- pre-tokenizer --------------------------------------------------------- */

size_t tri_tokenizer_pretoken_end(const char *text, size_t len, size_t pos) {
    const uint8_t *s = (const uint8_t *)text;
    /* 's 't 're 've 'm 'll 'd */
    if (s[pos] == '\'' && pos + 1 < len) {
        uint8_t a = s[pos + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
        if (pos + 2 < len) {
            uint8_t b = s[pos + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
        }
    }
    int c;
    size_t i = pos + class_at(s, len, pos, &c);
    if (s[pos] == ' ' && pos + 1 < len) {
        /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with the space */
        int c1;
        size_t w1 = class_at(s, len, pos + 1, &c1);
        if (c1 != CW) {
            c = c1;
            i = pos + 1 + w1;
        }
    }
    if (c != CW) { /* a run of one class */
        while (i < len) {
            int ci;
            size_t w = class_at(s, len, i, &ci);
            if (ci != c) break;
            i += w;
        }
        return i;
    }
    /* white space: "\s+(?!\S)" leaves the last white-space character for the
     * next pre-token when a non-white-space character follows; "\s+" takes a
     * single one. */
    size_t last = pos;
    i = pos;
    while (i < len) {
        int ci;
        size_t w = class_at(s, len, i, &ci);
        if (ci != CW) break;
        last = i;
        i += w;
    }
    if (i == len) return len;
    return last > pos ? last : i;
}

static int ascii_ws(uint8_t b) { return b == ' ' || (b >= 0x09 && b <= 0x0D); }

/* 1 if a well-formed, non-white-space character ends exactly at p (p > 0). */
static int nonws_char_ends_at(const uint8_t *s, size_t p) {
    uint8_t b = s[p - 1];
    if (b < 0x80) return !ascii_ws(b);
    size_t q = p - 1;
    while ((s[q] & 0xC0) == 0x80) {
        if (q == 0 || p - q >= 4) return 0;
        q--;
    }
    uint32_t cp;
    size_t w = utf8_next(s, p, q, &cp);
    if (cp == INVALID_CP || q + w != p) return 0;
    return char_class(cp) != CW;
}

static int safe_cut(const uint8_t *s, size_t len, size_t p) {
    return p > 0 && p < len && ascii_ws(s[p]) && nonws_char_ends_at(s, p);
}

size_t tri_tokenizer_cut_after(const char *text, size_t len, size_t pos) {
    const uint8_t *s = (const uint8_t *)text;
    for (size_t p = pos > 0 ? pos : 1; p < len; p++)
        if (safe_cut(s, len, p)) return p;
    return len;
}

size_t tri_tokenizer_cut_before(const char *text, size_t len, size_t pos) {
    const uint8_t *s = (const uint8_t *)text;
    if (len == 0) return 0;
    for (size_t p = pos < len - 1 ? pos : len - 1; p > 0; p--)
        if (safe_cut(s, len, p)) return p;
    return 0;
}

/* ---- GPT-2 byte <-> character mapping ------------------------------------- */

static int byte_printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t tri_tokenizer_byte_char(uint8_t b) {
    if (byte_printable(b)) return b;
    if (b <= 0x20) return 256u + b;                 /* 0x00..0x20 -> U+0100..U+0120 */
    if (b <= 0xA0) return 256u + 33u + (b - 0x7Fu); /* 0x7F..0xA0 -> U+0121..U+0142 */
    return 256u + 67u;                              /* 0xAD -> U+0143 */
}

/* The byte of a byte-level character, or -1. */
static int char_byte(uint32_t cp) {
    if (cp < 256) return byte_printable(cp) ? (int)cp : -1;
    if (cp <= 256 + 32) return (int)(cp - 256);
    if (cp <= 256 + 66) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* The byte whose id is i (0..255) in GPT-2's base order. */
static uint8_t gpt2_base_byte(int i) {
    if (i < 94) return (uint8_t)(0x21 + i);
    if (i < 106) return (uint8_t)(0xA1 + (i - 94));
    if (i < 188) return (uint8_t)(0xAE + (i - 106));
    int j = i - 188;
    if (j < 33) return (uint8_t)j;
    if (j < 67) return (uint8_t)(0x7F + (j - 33));
    return 0xAD;
}

/* Decodes a byte-level string (UTF-8 characters of the mapping) into out
 * (room for n bytes). Returns the byte count, or -1 if a character is not
 * one of the 256. */
static long bytelevel_decode(const char *str, size_t n, uint8_t *out) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    long k = 0;
    while (i < n) {
        uint32_t cp;
        size_t w = utf8_next(s, n, i, &cp);
        int b = cp == INVALID_CP ? -1 : char_byte(cp);
        if (b < 0) return -1;
        out[k++] = (uint8_t)b;
        i += w;
    }
    return k;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- hashing and a byte-string map ---------------------------------------- */

/* ---- pair -> rank table ----------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

/* Rank of the merge (a, b), or -1. */
static int32_t pair_rank(const tri_tokenizer *tk, int32_t a, int32_t b) {
    if (!tk->pair_cap) return -1;
    uint64_t key = pair_key(a, b);
    size_t mask = tk->pair_cap - 1;
    for (size_t i = (size_t)tri_mix64(key) & mask;; i = (i + 1) & mask) {
        if (tk->pair_key[i] == key) return tk->pair_rank[i];
        if (tk->pair_key[i] == UINT64_MAX) return -1;
    }
}

/* Fills the pair table from tk->merges; a repeated pair keeps its first rank. */
static int build_pair_table(tri_tokenizer *tk) {
    size_t cap = 16;
    while (cap < 2 * (size_t)tk->n_merges + 2) cap *= 2;
    tk->pair_key = malloc(cap * sizeof *tk->pair_key);
    tk->pair_rank = malloc(cap * sizeof *tk->pair_rank);
    if (!tk->pair_key || !tk->pair_rank) return -1;
    memset(tk->pair_key, 0xFF, cap * sizeof *tk->pair_key);
    tk->pair_cap = cap;
    for (int r = 0; r < tk->n_merges; r++) {
        uint64_t key = pair_key(tk->merges[3 * (size_t)r], tk->merges[3 * (size_t)r + 1]);
        size_t i = (size_t)tri_mix64(key) & (cap - 1);
        while (tk->pair_key[i] != UINT64_MAX && tk->pair_key[i] != key) i = (i + 1) & (cap - 1);
        if (tk->pair_key[i] == key) continue;
        tk->pair_key[i] = key;
        tk->pair_rank[i] = r;
    }
    return 0;
}

/* ---- BPE of one pre-token ------------------------------------------------------ */

#define SMALL_WORD 64

/* Words up to SMALL_WORD bytes: repeated scans over a rank array. */
static size_t bpe_small(const tri_tokenizer *tk, const uint8_t *w, size_t n, int32_t *out) {
    int32_t sym[SMALL_WORD], rk[SMALL_WORD];
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = tk->byte_id[w[i]];
    for (size_t i = 0; i + 1 < m; i++) rk[i] = pair_rank(tk, sym[i], sym[i + 1]);
    for (;;) {
        int32_t best = INT32_MAX;
        size_t bi = SIZE_MAX;
        for (size_t i = 0; i + 1 < m; i++)
            if (rk[i] >= 0 && rk[i] < best) {
                best = rk[i];
                bi = i;
            }
        if (bi == SIZE_MAX) break;
        sym[bi] = tk->merges[3 * (size_t)best + 2];
        memmove(sym + bi + 1, sym + bi + 2, (m - bi - 2) * sizeof *sym);
        if (m >= bi + 3) memmove(rk + bi + 1, rk + bi + 2, (m - bi - 3) * sizeof *rk);
        m--;
        if (bi > 0) rk[bi - 1] = pair_rank(tk, sym[bi - 1], sym[bi]);
        if (bi + 1 < m) rk[bi] = pair_rank(tk, sym[bi], sym[bi + 1]);
    }
    memcpy(out, sym, m * sizeof *sym);
    return m;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Long words: a linked list of symbols and a min-heap of (rank, position),
 * O(n log n). Same result as bpe_small: lowest rank first, leftmost on ties. */
static long bpe_long(const tri_tokenizer *tk, const uint8_t *w, size_t n, int32_t *out) {
    int32_t *sym = malloc(n * sizeof *sym);
    int64_t *prv = malloc(n * sizeof *prv), *nxt = malloc(n * sizeof *nxt);
    uint64_t *heap = malloc(3 * n * sizeof *heap); /* n - 1 initial + 2 per merge */
    if (!sym || !prv || !nxt || !heap) {
        free(sym), free(prv), free(nxt), free(heap);
        return -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i] = tk->byte_id[w[i]];
        prv[i] = (int64_t)i - 1;
        nxt[i] = i + 1 < n ? (int64_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = pair_rank(tk, sym[i], sym[i + 1]);
        if (r >= 0) heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int32_t r = (int32_t)(top >> 32);
        size_t i = (size_t)(top & 0xFFFFFFFFu);
        if (sym[i] < 0 || nxt[i] < 0) continue;
        size_t j = (size_t)nxt[i];
        if (pair_rank(tk, sym[i], sym[j]) != r) continue; /* stale entry */
        sym[i] = tk->merges[3 * (size_t)r + 2];
        sym[j] = -1;
        nxt[i] = nxt[j];
        if (nxt[j] >= 0) prv[nxt[j]] = (int64_t)i;
        if (prv[i] >= 0) {
            size_t p = (size_t)prv[i];
            int32_t r2 = pair_rank(tk, sym[p], sym[i]);
            if (r2 >= 0) heap_push(heap, &hn, ((uint64_t)r2 << 32) | p);
        }
        if (nxt[i] >= 0) {
            int32_t r3 = pair_rank(tk, sym[i], sym[nxt[i]]);
            if (r3 >= 0) heap_push(heap, &hn, ((uint64_t)r3 << 32) | i);
        }
    }
    size_t m = 0;
    for (int64_t i = 0; i >= 0; i = nxt[i]) out[m++] = sym[i];
    free(sym), free(prv), free(nxt), free(heap);
    return (long)m;
}

/* ---- encode cache ---------------------------------------------------------------- */

#define CACHE_MAX_WORD    48
#define CACHE_MAX_ENTRIES (1u << 18)

struct tri_tokcache {
    tri_bmap map; /* word -> (offset into ids) << 8 | count */
    int32_t *ids; /* (cap) */
    size_t n, cap;
};

tri_tokcache *tri_tokcache_new(void) {
    tri_tokcache *c = calloc(1, sizeof *c);
    if (!c || tri_bmap_init(&c->map, 1u << 12)) {
        free(c);
        tri_error("tokenizer: out of memory for the encode cache");
        return NULL;
    }
    return c;
}

void tri_tokcache_free(tri_tokcache *c) {
    if (!c) return;
    tri_bmap_free(&c->map);
    free(c->ids);
    free(c);
}

/* ---- encode / decode ------------------------------------------------------------- */

int tri_tokenizer_vocab_size(const tri_tokenizer *tk) { return tk->vocab_size; }
int tri_tokenizer_eot(const tri_tokenizer *tk) { return tk->eot; }

static int reserve_ids(int32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    int32_t *p = realloc(*ids, nc * sizeof *p);
    if (!p) return -1;
    *ids = p;
    *cap = nc;
    return 0;
}

/* Appends the ids of word w (n bytes) at out (room for n); returns the count or -1. */
static long encode_word(const tri_tokenizer *tk, tri_tokcache *c, const uint8_t *w, size_t n, int32_t *out) {
    if (n == 1) {
        out[0] = tk->byte_id[w[0]];
        return 1;
    }
    if (!c || n > CACHE_MAX_WORD) return n <= SMALL_WORD ? (long)bpe_small(tk, w, n, out) : bpe_long(tk, w, n, out);
    uint64_t h = tri_bmap_hash(w, n);
    int64_t *v = tri_bmap_find(&c->map, w, n, h);
    if (v) {
        size_t cnt = (size_t)(*v & 0xFF), off = (size_t)(*v >> 8);
        memcpy(out, c->ids + off, cnt * sizeof *out);
        return (long)cnt;
    }
    size_t m = bpe_small(tk, w, n, out);
    if (c->map.count >= CACHE_MAX_ENTRIES) {
        tri_bmap_clear(&c->map);
        c->n = 0;
    }
    if (reserve_ids(&c->ids, &c->cap, c->n + m)) return (long)m; /* caching is optional */
    v = tri_bmap_upsert(&c->map, w, n, h, 0);
    if (!v) return (long)m;
    memcpy(c->ids + c->n, out, m * sizeof *out);
    *v = (int64_t)((c->n << 8) | m);
    c->n += m;
    return (long)m;
}

int tri_tokenizer_encode_append(const tri_tokenizer *tk, tri_tokcache *cache, const char *text, size_t len,
                                int32_t **ids, size_t *n, size_t *cap) {
    const uint8_t *s = (const uint8_t *)text;
    if (reserve_ids(ids, cap, *n + 1)) goto oom;
    if (tk->n_merges == 0) { /* every byte is a token */
        if (reserve_ids(ids, cap, *n + len)) goto oom;
        for (size_t i = 0; i < len; i++) (*ids)[*n + i] = tk->byte_id[s[i]];
        *n += len;
        return 0;
    }
    size_t pos = 0;
    while (pos < len) {
        size_t end = tri_tokenizer_pretoken_end(text, len, pos);
        if (reserve_ids(ids, cap, *n + (end - pos))) goto oom;
        long m = encode_word(tk, cache, s + pos, end - pos, *ids + *n);
        if (m < 0) goto oom;
        *n += (size_t)m;
        pos = end;
    }
    return 0;
oom:
    tri_error("tokenizer: out of memory while encoding %zu bytes", len);
    return -1;
}

size_t tri_tokenizer_encode(const tri_tokenizer *tk, const char *text, size_t len, int32_t **ids) {
    *ids = NULL;
    size_t n = 0, cap = 0;
    /* a cache pays off only when words repeat */
    tri_tokcache *c = len >= (1u << 16) ? tri_tokcache_new() : NULL;
    int rc = tri_tokenizer_encode_append(tk, c, text, len, ids, &n, &cap);
    tri_tokcache_free(c);
    if (rc) {
        free(*ids);
        *ids = NULL;
        return SIZE_MAX;
    }
    return n;
}

size_t tri_tokenizer_decode(const tri_tokenizer *tk, const int32_t *ids, size_t n, char **text) {
    *text = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tk->vocab_size || !(tk->flags[id] & TRI_TOK_PRESENT)) {
            tri_error("token id %ld at position %zu is not in the vocabulary (size %d)", (long)id, i, tk->vocab_size);
            return SIZE_MAX;
        }
        total += tk->tok_off[id + 1] - tk->tok_off[id];
    }
    char *out = malloc(total + 1);
    if (!out) {
        tri_error("tokenizer: out of memory decoding %zu tokens", n);
        return SIZE_MAX;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t a = tk->tok_off[ids[i]], b = tk->tok_off[ids[i] + 1];
        memcpy(out + k, tk->tok_bytes + a, b - a);
        k += b - a;
    }
    out[k] = 0;
    *text = out;
    return k;
}

/* ---- construction ------------------------------------------------------------------ */

void tri_tokenizer_free(tri_tokenizer *tk) {
    if (!tk) return;
    free(tk->flags);
    free(tk->tok_off);
    free(tk->tok_bytes);
    free(tk->merges);
    free(tk->pair_key);
    free(tk->pair_rank);
    memset(tk, 0, sizeof *tk);
}

void tri_tokenizer_bytes(tri_tokenizer *tk) {
    memset(tk, 0, sizeof *tk);
    tk->vocab_size = 256;
    tk->eot = -1;
    tk->flags = malloc(256);
    tk->tok_off = malloc(257 * sizeof *tk->tok_off);
    tk->tok_bytes = malloc(256);
    if (!tk->flags || !tk->tok_off || !tk->tok_bytes) {
        /* 2.6 KB: the contract says this cannot fail, so failing is fatal */
        tri_error("tokenizer: out of memory for the byte tokenizer");
        abort();
    }
    for (int b = 0; b < 256; b++) {
        tk->byte_id[b] = b;
        tk->flags[b] = TRI_TOK_PRESENT;
        tk->tok_off[b] = (size_t)b;
        tk->tok_bytes[b] = (uint8_t)b;
    }
    tk->tok_off[256] = 256;
}

static const char k_eot[] = "<|endoftext|>";

int tri_tokenizer_from_merges(tri_tokenizer *tk, const int32_t *pairs, int n, int with_eot) {
    memset(tk, 0, sizeof *tk);
    tri_bmap bytes_to_id = {0};
    size_t max_ids = 256 + (size_t)(n > 0 ? n : 0) + 1;
    size_t pool_cap = 4096, pool_len = 0;
    tk->flags = calloc(max_ids, 1);
    tk->tok_off = malloc((max_ids + 1) * sizeof *tk->tok_off);
    tk->tok_bytes = malloc(pool_cap);
    tk->merges = malloc(3 * (size_t)(n > 0 ? n : 1) * sizeof *tk->merges);
    if (!tk->flags || !tk->tok_off || !tk->tok_bytes || !tk->merges || tri_bmap_init(&bytes_to_id, 2 * max_ids))
        goto oom;
    int nt = 0;
    tk->tok_off[0] = 0;
    for (int i = 0; i < 256; i++) {
        uint8_t b = gpt2_base_byte(i);
        tk->tok_bytes[pool_len++] = b;
        tk->tok_off[i + 1] = pool_len;
        tk->flags[i] = TRI_TOK_PRESENT;
        tk->byte_id[b] = i;
        int64_t *v = tri_bmap_upsert(&bytes_to_id, &b, 1, tri_bmap_hash(&b, 1), i);
        if (!v) goto oom;
        nt++;
    }
    for (int k = 0; k < n; k++) {
        int32_t a = pairs[2 * (size_t)k], b = pairs[2 * (size_t)k + 1];
        if (a < 0 || a >= nt || b < 0 || b >= nt) {
            tri_error("tokenizer: merge %d (%ld, %ld) names an id outside [0, %d)", k, (long)a, (long)b, nt);
            tri_tokenizer_free(tk);
            tri_bmap_free(&bytes_to_id);
            return -1;
        }
        size_t la = tk->tok_off[a + 1] - tk->tok_off[a], lb = tk->tok_off[b + 1] - tk->tok_off[b];
        if (pool_len + la + lb > pool_cap) {
            while (pool_len + la + lb > pool_cap) pool_cap *= 2;
            uint8_t *np = realloc(tk->tok_bytes, pool_cap);
            if (!np) goto oom;
            tk->tok_bytes = np;
        }
        uint8_t *dst = tk->tok_bytes + pool_len;
        memmove(dst, tk->tok_bytes + tk->tok_off[a], la);
        memmove(dst + la, tk->tok_bytes + tk->tok_off[b], lb);
        int64_t *v = tri_bmap_upsert(&bytes_to_id, dst, la + lb, tri_bmap_hash(dst, la + lb), nt);
        if (!v) goto oom;
        if (*v == nt) { /* a new token */
            pool_len += la + lb;
            tk->tok_off[nt + 1] = pool_len;
            tk->flags[nt] = TRI_TOK_PRESENT;
            nt++;
        }
        tk->merges[3 * (size_t)k] = a;
        tk->merges[3 * (size_t)k + 1] = b;
        tk->merges[3 * (size_t)k + 2] = (int32_t)*v;
    }
    tk->n_merges = n > 0 ? n : 0;
    tk->eot = -1;
    if (with_eot) {
        size_t le = sizeof k_eot - 1;
        if (pool_len + le > pool_cap) {
            uint8_t *np = realloc(tk->tok_bytes, pool_len + le);
            if (!np) goto oom;
            tk->tok_bytes = np;
        }
        memcpy(tk->tok_bytes + pool_len, k_eot, le);
        pool_len += le;
        tk->tok_off[nt + 1] = pool_len;
        tk->flags[nt] = TRI_TOK_PRESENT | TRI_TOK_ADDED | TRI_TOK_SPECIAL;
        tk->eot = nt++;
    }
    tk->vocab_size = nt;
    tri_bmap_free(&bytes_to_id);
    if (build_pair_table(tk)) goto oom;
    return 0;
oom:
    tri_error("tokenizer: out of memory building %d merges", n);
    tri_bmap_free(&bytes_to_id);
    tri_tokenizer_free(tk);
    return -1;
}

/* ---- loading ----------------------------------------------------------------------- */

/* Reads a whole regular file (NUL-terminated); a named pipe or a directory is
 * refused at once (src/base/file.h). Returns 0 or -1 (printed). */
static int slurp(const char *path, char **buf, size_t *len) {
    *len = 0;
    *buf = tri_slurp(path, "tokenizer", 0, len);
    return *buf ? 0 : -1;
}

/* A token being loaded. */
typedef struct ltok {
    int present, added, special;
    size_t off, len; /* bytes in the loader's pool */
} ltok;

typedef struct loader {
    const char *file; /* for messages */
    ltok *tok;        /* (n_tok) indexed by id */
    int n_tok;
    /* Ids must be 0 .. N-1 without gaps, N the number of distinct tokens, so
     * an id at or above the number of entries in the file leaves a gap: it is
     * refused before anything is sized by it (memory follows the file, not
     * the largest id). */
    size_t id_limit;
    uint8_t *pool;
    size_t pool_len, pool_cap;
    tri_bmap by_bytes; /* token bytes -> id (regular tokens) */
} loader;

static int pool_add(loader *L, const void *p, size_t n, size_t *off) {
    if (L->pool_len + n > L->pool_cap) {
        size_t nc = L->pool_cap ? L->pool_cap : 1 << 16;
        while (nc < L->pool_len + n) nc *= 2;
        uint8_t *np = realloc(L->pool, nc);
        if (!np) return -1;
        L->pool = np;
        L->pool_cap = nc;
    }
    if (n) memcpy(L->pool + L->pool_len, p, n);
    *off = L->pool_len;
    L->pool_len += n;
    return 0;
}

static int loader_grow(loader *L, int id) {
    if (id < L->n_tok) return 0;
    int nn = L->n_tok ? L->n_tok : 1024;
    while (nn <= id) nn *= 2;
    ltok *nt = realloc(L->tok, (size_t)nn * sizeof *nt);
    if (!nt) return -1;
    memset(nt + L->n_tok, 0, (size_t)(nn - L->n_tok) * sizeof *nt);
    L->tok = nt;
    L->n_tok = nn;
    return 0;
}

static void loader_free(loader *L) {
    free(L->tok);
    free(L->pool);
    tri_bmap_free(&L->by_bytes);
}

#define MAX_VOCAB (1 << 30)

/* Entries of a JSON object or array (0 for anything else). */
static size_t json_count(const cJSON *x) {
    size_t n = 0;
    if (cJSON_IsObject(x) || cJSON_IsArray(x))
        for (const cJSON *e = x->child; e; e = e->next) n++;
    return n;
}

/* An id the file cannot fill without a gap; `where` names the entry. */
static int id_leaves_gap(const loader *L, int id, const char *where) {
    if ((size_t)id < L->id_limit) return 0;
    tri_error("%s: %s: id %d leaves a gap: the file has %zu token entries, so its ids must be 0 .. %zu "
              "without gaps",
              L->file, where, id, L->id_limit, L->id_limit ? L->id_limit - 1 : 0);
    return 1;
}

/* Reads the vocab object (string -> id); `what` names it in messages. */
static int load_vocab(loader *L, const cJSON *vocab, const char *what) {
    if (!cJSON_IsObject(vocab)) {
        tri_error("%s: %s is not a JSON object", L->file, what);
        return -1;
    }
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        const char *s = e->string;
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_VOCAB ||
            e->valuedouble != (double)(int)e->valuedouble) {
            tri_error("%s: %s[\"%s\"]: expected an integer id in [0, 2^30)", L->file, what, s);
            goto fail;
        }
        int id = (int)e->valuedouble;
        char where[96];
        snprintf(where, sizeof where, "%s[\"%.40s%s\"]", what, s, strlen(s) > 40 ? "..." : "");
        if (id_leaves_gap(L, id, where)) goto fail;
        size_t sl = strlen(s);
        if (sl > tmp_cap) {
            free(tmp);
            tmp_cap = sl * 2;
            tmp = malloc(tmp_cap);
            if (!tmp) goto oom;
        }
        if (loader_grow(L, id)) goto oom;
        ltok *t = &L->tok[id];
        if (t->present && !t->added) {
            tri_error("%s: %s[\"%s\"]: id %d is already used by another token", L->file, what, s, id);
            goto fail;
        }
        long nb = bytelevel_decode(s, sl, tmp);
        if (t->added) {
            /* tokenizer.json lists its added tokens in the vocab too, under the
             * same id, as the raw content or in byte-level characters */
            const uint8_t *c = L->pool + t->off;
            if ((t->len == sl && memcmp(c, s, sl) == 0) ||
                (nb >= 0 && (size_t)nb == t->len && memcmp(c, tmp, t->len) == 0))
                continue;
            tri_error("%s: %s[\"%s\"]: id %d clashes with added_tokens \"%.*s\", which has the same id", L->file, what,
                      s, id, (int)(t->len > 60 ? 60 : t->len), (const char *)c);
            goto fail;
        }
        if (nb < 0) {
            tri_error("%s: %s[\"%s\"] (id %d): not a byte-level token (a character outside GPT-2's 256 "
                      "byte characters)",
                      L->file, what, s, id);
            goto fail;
        }
        if (nb == 0) {
            tri_error("%s: %s: the empty string is not a token", L->file, what);
            goto fail;
        }
        t->present = 1;
        if (pool_add(L, tmp, (size_t)nb, &t->off)) goto oom;
        t->len = (size_t)nb;
        int64_t *v = tri_bmap_upsert(&L->by_bytes, tmp, (size_t)nb, tri_bmap_hash(tmp, (size_t)nb), id);
        if (!v) goto oom;
    }
    free(tmp);
    return 0;
oom:
    tri_error("%s: out of memory", L->file);
fail:
    free(tmp);
    return -1;
}

/* Reads "added_tokens": [{"id": .., "content": "..", "special": ..}, ...]. */
static int load_added(loader *L, const cJSON *added) {
    if (!added || cJSON_IsNull(added)) return 0;
    if (!cJSON_IsArray(added)) {
        tri_error("%s: added_tokens is not an array", L->file);
        return -1;
    }
    int k = 0;
    for (const cJSON *e = added->child; e; e = e->next, k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(e, "special");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_VOCAB ||
            id->valuedouble != (double)(int)id->valuedouble || !cJSON_IsString(content) || !content->valuestring[0]) {
            tri_error("%s: added_tokens[%d]: expected an integer \"id\" and a non-empty \"content\"", L->file, k);
            return -1;
        }
        int i = (int)id->valuedouble;
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%d]", k);
        if (id_leaves_gap(L, i, where)) return -1;
        if (loader_grow(L, i)) goto oom;
        ltok *t = &L->tok[i];
        if (t->present) {
            tri_error("%s: added_tokens[%d]: id %d appears twice", L->file, k, i);
            return -1;
        }
        t->present = t->added = 1;
        t->special = cJSON_IsTrue(special);
        size_t cl = strlen(content->valuestring);
        if (pool_add(L, content->valuestring, cl, &t->off)) goto oom;
        t->len = cl;
    }
    return 0;
oom:
    tri_error("%s: out of memory", L->file);
    return -1;
}

/* Looks up a byte-level token string; returns its id or -1. */
static int lookup_str(loader *L, const char *s, size_t n, uint8_t *tmp) {
    long nb = bytelevel_decode(s, n, tmp);
    if (nb <= 0) return -1;
    int64_t *v = tri_bmap_find(&L->by_bytes, tmp, (size_t)nb, tri_bmap_hash(tmp, (size_t)nb));
    return v ? (int)*v : -1;
}

/* Appends merge (a, b) given as byte-level strings; `where` names it. */
static int add_merge(loader *L, tri_tokenizer *tk, const char *a, size_t la, const char *b, size_t lb,
                     const char *where, int32_t **merges, size_t *cap) {
    uint8_t *tmp = malloc(la + lb + 1);
    if (!tmp) {
        tri_error("%s: out of memory", L->file);
        return -1;
    }
    int ia = lookup_str(L, a, la, tmp), ib = lookup_str(L, b, lb, tmp);
    if (ia < 0 || ib < 0) {
        tri_error("%s: %s: token \"%.*s\" is not in the vocab", L->file, where, (int)(ia < 0 ? la : lb),
                  ia < 0 ? a : b);
        free(tmp);
        return -1;
    }
    size_t na = L->tok[ia].len, nb = L->tok[ib].len;
    memcpy(tmp, L->pool + L->tok[ia].off, na);
    memcpy(tmp + na, L->pool + L->tok[ib].off, nb);
    int64_t *v = tri_bmap_find(&L->by_bytes, tmp, na + nb, tri_bmap_hash(tmp, na + nb));
    free(tmp);
    if (!v) {
        tri_error("%s: %s: the merged token \"%.*s%.*s\" is not in the vocab", L->file, where, (int)la, a, (int)lb, b);
        return -1;
    }
    if ((size_t)tk->n_merges + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        int32_t *nm = tk->n_merges < MAX_VOCAB ? realloc(*merges, 3 * nc * sizeof *nm) : NULL;
        if (!nm) {
            tri_error("%s: out of memory for %d merges", L->file, tk->n_merges);
            return -1;
        }
        *merges = nm;
        *cap = nc;
    }
    int32_t *m = *merges + 3 * (size_t)tk->n_merges;
    m[0] = ia;
    m[1] = ib;
    m[2] = (int32_t)*v;
    tk->n_merges++;
    return 0;
}

/* Moves the loaded tokens into tk (after the merges are in). */
static int loader_finish(loader *L, tri_tokenizer *tk) {
    int n = 0;
    for (int i = 0; i < L->n_tok; i++)
        if (L->tok[i].present) n = i + 1;
    for (int i = 0; i < n; i++)
        if (!L->tok[i].present) {
            tri_error("%s: no token has id %d, but ids go up to %d: ids must be 0 .. N-1 without gaps", L->file, i,
                      n - 1);
            return -1;
        }
    tk->vocab_size = n;
    tk->eot = -1;
    tk->flags = calloc(n > 0 ? (size_t)n : 1, 1);
    tk->tok_off = malloc(((size_t)n + 1) * sizeof *tk->tok_off);
    tk->tok_bytes = malloc(L->pool_len + 1);
    if (!tk->flags || !tk->tok_off || !tk->tok_bytes) {
        tri_error("%s: out of memory", L->file);
        return -1;
    }
    for (int b = 0; b < 256; b++) tk->byte_id[b] = -1;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const ltok *t = &L->tok[i];
        tk->tok_off[i] = k;
        if (!t->present) continue;
        memcpy(tk->tok_bytes + k, L->pool + t->off, t->len);
        k += t->len;
        tk->flags[i] = (uint8_t)(TRI_TOK_PRESENT | (t->added ? TRI_TOK_ADDED : 0) | (t->special ? TRI_TOK_SPECIAL : 0));
        if (!t->added && t->len == 1) tk->byte_id[L->pool[t->off]] = i;
        if (t->len == sizeof k_eot - 1 && memcmp(L->pool + t->off, k_eot, t->len) == 0 && (tk->eot < 0 || t->added))
            tk->eot = i;
    }
    tk->tok_off[n] = k;
    /* GPT-2's vocab.json lists <|endoftext|> as a plain entry: mark it special */
    if (tk->eot >= 0) tk->flags[tk->eot] |= TRI_TOK_ADDED | TRI_TOK_SPECIAL;
    for (int b = 0; b < 256; b++)
        if (tk->byte_id[b] < 0) {
            uint32_t cp = tri_tokenizer_byte_char((uint8_t)b);
            char u[4];
            size_t ul = put_utf8(u, cp);
            tri_error("%s: the vocab has no token for byte 0x%02X (\"%.*s\"); a byte-level BPE vocab "
                      "needs all 256",
                      L->file, b, (int)ul, u);
            return -1;
        }
    if (build_pair_table(tk)) {
        tri_error("%s: out of memory", L->file);
        return -1;
    }
    return 0;
}

static int check_type(const char *file, const cJSON *obj, const char *what, const char *want) {
    if (!obj || cJSON_IsNull(obj)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, want) != 0) {
        tri_error("%s: %s.type is %s%s%s; only %s is supported", file, what, cJSON_IsString(t) ? "\"" : "",
                  cJSON_IsString(t) ? t->valuestring : "missing", cJSON_IsString(t) ? "\"" : "", want);
        return -1;
    }
    return 0;
}

static int load_hf_json(tri_tokenizer *tk, const char *path) {
    char *text;
    size_t len;
    if (slurp(path, &text, &len)) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        tri_error("%s: not valid JSON (near byte %zu)", path, off);
        free(text);
        return -1;
    }
    free(text);
    loader L = {.file = path};
    int32_t *merges = NULL;
    size_t mcap = 0;
    char where[64];
    if (tri_bmap_init(&L.by_bytes, 1 << 16)) goto oom;
    if (!cJSON_IsObject(root)) {
        tri_error("%s: the top level is not a JSON object", path);
        goto fail;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        tri_error("%s: no \"model\" object (not a tokenizer.json?)", path);
        goto fail;
    }
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (mtype && !(cJSON_IsString(mtype) && strcmp(mtype->valuestring, "BPE") == 0)) {
        tri_error("%s: model.type is %s%s%s; only \"BPE\" is supported", path, cJSON_IsString(mtype) ? "\"" : "",
                  cJSON_IsString(mtype) ? mtype->valuestring : "not a string", cJSON_IsString(mtype) ? "\"" : "");
        goto fail;
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        tri_error("%s: normalizer: only null is supported (the GPT-2 scheme has none)", path);
        goto fail;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (check_type(path, pre, "pre_tokenizer", "ByteLevel")) goto fail;
    if (pre && !cJSON_IsNull(pre)) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"))) {
            tri_error("%s: pre_tokenizer.add_prefix_space: only false is supported", path);
            goto fail;
        }
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex"))) {
            tri_error("%s: pre_tokenizer.use_regex: only true (the GPT-2 pattern) is supported", path);
            goto fail;
        }
    }
    static const char *const k_empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, k_empty_keys[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0])) {
            tri_error("%s: model.%s: only null or \"\" is supported", path, k_empty_keys[i]);
            goto fail;
        }
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"))) {
        tri_error("%s: model.ignore_merges: only false is supported", path);
        goto fail;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    L.id_limit = json_count(added) + json_count(vocab);
    if (load_added(&L, added)) goto fail;
    if (load_vocab(&L, vocab, "model.vocab")) goto fail;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(ms)) {
        tri_error("%s: model.merges is missing or not an array", path);
        goto fail;
    }
    int k = 0;
    for (const cJSON *e = ms->child; e; e = e->next, k++) {
        snprintf(where, sizeof where, "model.merges[%d]", k);
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) {
                tri_error("%s: %s: \"%s\" is not two tokens separated by one space", path, where, s);
                goto fail;
            }
            if (add_merge(&L, tk, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), where, &merges, &mcap)) goto fail;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            const char *a = e->child->valuestring, *b = e->child->next->valuestring;
            if (add_merge(&L, tk, a, strlen(a), b, strlen(b), where, &merges, &mcap)) goto fail;
        } else {
            tri_error("%s: %s: expected \"a b\" or [\"a\", \"b\"]", path, where);
            goto fail;
        }
    }
    tk->merges = merges;
    merges = NULL;
    if (loader_finish(&L, tk)) goto fail;
    loader_free(&L);
    cJSON_Delete(root);
    return 0;
oom:
    tri_error("%s: out of memory", path);
fail:
    free(merges);
    loader_free(&L);
    cJSON_Delete(root);
    tri_tokenizer_free(tk);
    return -1;
}

static int load_gpt2_files(tri_tokenizer *tk, const char *vocab_path, const char *merges_path) {
    char *text = NULL, *mtext = NULL;
    size_t len, mlen;
    cJSON *root = NULL;
    loader L = {.file = vocab_path};
    int32_t *merges = NULL;
    size_t mcap = 0;
    if (slurp(vocab_path, &text, &len)) return -1;
    if (slurp(merges_path, &mtext, &mlen)) {
        free(text);
        return -1;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        tri_error("%s: not valid JSON (near byte %zu)", vocab_path, off);
        goto fail;
    }
    if (tri_bmap_init(&L.by_bytes, 1 << 16)) {
        tri_error("%s: out of memory", vocab_path);
        goto fail;
    }
    L.id_limit = json_count(root);
    if (load_vocab(&L, root, "the vocab")) goto fail;
    L.file = merges_path;
    size_t pos = 0;
    char where[64];
    for (int line = 1; pos < mlen; line++) {
        char *s = mtext + pos, *nl = memchr(s, '\n', mlen - pos);
        size_t ll = nl ? (size_t)(nl - s) : mlen - pos;
        pos += ll + 1;
        if (ll && s[ll - 1] == '\r') ll--;
        if (ll == 0 || (line == 1 && ll >= 9 && memcmp(s, "#version:", 9) == 0)) continue;
        char *sp = memchr(s, ' ', ll);
        snprintf(where, sizeof where, "line %d", line);
        if (!sp || sp == s || sp + 1 == s + ll || memchr(sp + 1, ' ', (size_t)(s + ll - sp - 1))) {
            tri_error("%s: line %d: \"%.*s\" is not two tokens separated by one space", merges_path, line, (int)ll, s);
            goto fail;
        }
        if (add_merge(&L, tk, s, (size_t)(sp - s), sp + 1, (size_t)(s + ll - sp - 1), where, &merges, &mcap)) goto fail;
    }
    tk->merges = merges;
    merges = NULL;
    L.file = vocab_path;
    if (loader_finish(&L, tk)) goto fail;
    loader_free(&L);
    cJSON_Delete(root);
    free(text);
    free(mtext);
    return 0;
fail:
    free(merges);
    loader_free(&L);
    cJSON_Delete(root);
    free(text);
    free(mtext);
    tri_tokenizer_free(tk);
    return -1;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int tri_tokenizer_load(tri_tokenizer *tk, const char *path) {
    memset(tk, 0, sizeof *tk);
    char v[2048], m[2048];
    size_t pl = strlen(path);
    if (pl + 16 > sizeof v) {
        tri_error("%s: path too long", path);
        return -1;
    }
    if (is_dir(path)) {
        snprintf(v, sizeof v, "%s/tokenizer.json", path);
        if (exists(v)) return load_hf_json(tk, v);
        snprintf(v, sizeof v, "%s/vocab.json", path);
        snprintf(m, sizeof m, "%s/merges.txt", path);
        return load_gpt2_files(tk, v, m);
    }
    if (pl >= 10 && strcmp(path + pl - 10, "vocab.json") == 0) {
        snprintf(m, sizeof m, "%.*smerges.txt", (int)(pl - 10), path);
        return load_gpt2_files(tk, path, m);
    }
    if (exists(path)) return load_hf_json(tk, path);
    snprintf(v, sizeof v, "%svocab.json", path);
    snprintf(m, sizeof m, "%smerges.txt", path);
    if (exists(v)) return load_gpt2_files(tk, v, m);
    tri_error("%s: no such tokenizer file (nor %s + %s)", path, v, m);
    return -1;
}

/* ---- saving ---------------------------------------------------------------------------- */

/* Writes n bytes as a JSON string body; byte_level maps each byte through
 * bytes_to_unicode first, otherwise the bytes are raw UTF-8. */
static void json_str(FILE *f, const uint8_t *p, size_t n, int byte_level) {
    char u[8];
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        uint32_t c = byte_level ? tri_tokenizer_byte_char(p[i]) : p[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", (unsigned)c);
        } else if (byte_level) {
            fwrite(u, 1, put_utf8(u, c), f);
        } else {
            fputc((int)c, f);
        }
    }
    fputc('"', f);
}

static void tok_str(FILE *f, const tri_tokenizer *tk, int id) {
    size_t a = tk->tok_off[id], b = tk->tok_off[id + 1];
    json_str(f, tk->tok_bytes + a, b - a, !(tk->flags[id] & TRI_TOK_ADDED));
}

int tri_tokenizer_save(const tri_tokenizer *tk, const char *path) {
    char tmp[2048];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        tri_error("%s: path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        tri_error("%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [", f);
    int first = 1;
    for (int i = 0; i < tk->vocab_size; i++) {
        if (!(tk->flags[i] & TRI_TOK_ADDED)) continue;
        fprintf(f, "%s\n    {\"id\": %d, \"content\": ", first ? "" : ",", i);
        tok_str(f, tk, i);
        fprintf(f,
                ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
                "\"special\": %s}",
                tk->flags[i] & TRI_TOK_SPECIAL ? "true" : "false");
        first = 0;
    }
    fputs(first ? "],\n" : "\n  ],\n", f);
    fputs("  \"normalizer\": null,\n"
          "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
          "\"use_regex\": true},\n"
          "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
          "\"use_regex\": true},\n"
          "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
          "\"use_regex\": true},\n"
          "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
          "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
          "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"vocab\": {",
          f);
    first = 1;
    for (int i = 0; i < tk->vocab_size; i++) {
        if (!(tk->flags[i] & TRI_TOK_PRESENT)) continue;
        fputs(first ? "\n      " : ",\n      ", f);
        tok_str(f, tk, i);
        fprintf(f, ": %d", i);
        first = 0;
    }
    fputs("\n    },\n    \"merges\": [", f);
    for (int r = 0; r < tk->n_merges; r++) {
        int a = tk->merges[3 * (size_t)r], b = tk->merges[3 * (size_t)r + 1];
        /* "a b": byte-level strings never hold a space (0x20 maps to U+0120) */
        size_t la = tk->tok_off[a + 1] - tk->tok_off[a], lb = tk->tok_off[b + 1] - tk->tok_off[b];
        fputs(r ? ",\n      \"" : "\n      \"", f);
        char u[8];
        for (size_t i = 0; i < la + lb; i++) {
            uint8_t byte = i < la ? tk->tok_bytes[tk->tok_off[a] + i] : tk->tok_bytes[tk->tok_off[b] + i - la];
            if (i == la) fputc(' ', f);
            uint32_t c = tri_tokenizer_byte_char(byte);
            if (c == '"' || c == '\\') fputc('\\', f);
            fwrite(u, 1, put_utf8(u, c), f);
        }
        fputc('"', f);
    }
    fputs("\n    ]\n  }\n}\n", f);
    int err = ferror(f);
    if (fflush(f) != 0) err = 1;
    if (fsync(fileno(f)) != 0) err = 1;
    if (fclose(f) != 0) err = 1;
    if (err) {
        tri_error("%s: write error: %s", tmp, strerror(errno));
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        tri_error("%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
