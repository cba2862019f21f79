/* Tests of src/typestr.c: NumPy typestr <-> DLDataType. */
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"
#include "test-util.h"

struct good {
    const char *typestr;
    uint8_t code, bits;
    const char *formatted;
};

static const struct good goods[] = {
    {"|b1", kDLBool, 8, "|b1"},
    {"|i1", kDLInt, 8, "|i1"},
    {"<i2", kDLInt, 16, "<i2"},
    {"<i4", kDLInt, 32, "<i4"},
    {"<i8", kDLInt, 64, "<i8"},
    {"|u1", kDLUInt, 8, "|u1"},
    {"<u2", kDLUInt, 16, "<u2"},
    {"<u4", kDLUInt, 32, "<u4"},
    {"<u8", kDLUInt, 64, "<u8"},
    {"<f2", kDLFloat, 16, "<f2"},
    {"<f4", kDLFloat, 32, "<f4"},
    {"<f8", kDLFloat, 64, "<f8"},
    {"<c8", kDLComplex, 64, "<c8"},
    {"<c16", kDLComplex, 128, "<c16"},
    {"=f4", kDLFloat, 32, "<f4"},
    {"|f8", kDLFloat, 64, "<f8"},
    {"<b1", kDLBool, 8, "|b1"},
    {"=u1", kDLUInt, 8, "|u1"},
    /* NumPy's reading: the byte order may be left out, '>' means nothing
     * for one byte, and leading zeros are a size like any other. */
    {"f4", kDLFloat, 32, "<f4"},
    {"u1", kDLUInt, 8, "|u1"},
    {">u1", kDLUInt, 8, "|u1"},
    {">b1", kDLBool, 8, "|b1"},
    {">i1", kDLInt, 8, "|i1"},
    {"<f04", kDLFloat, 32, "<f4"},
};

struct bad {
    const char *typestr;
    int status;
    const char *words;
};

static const struct bad bads[] = {
    {">f4", CAI_EUNSUPPORTED, "native byte order"},
    {">i8", CAI_EUNSUPPORTED, "native byte order"},
    {"<V8", CAI_EUNSUPPORTED, "kind 'V'"},
    {"|O8", CAI_EUNSUPPORTED, "kind 'O'"},
    {"<U4", CAI_EUNSUPPORTED, "kind 'U'"},
    {"|S5", CAI_EUNSUPPORTED, "kind 'S'"},
    {"<M8", CAI_EUNSUPPORTED, "kind 'M'"},
    {"<m8", CAI_EUNSUPPORTED, "kind 'm'"},
    {"<M8[s]", CAI_EUNSUPPORTED, "kind 'M'"},
    {"<m8[ns]", CAI_EUNSUPPORTED, "kind 'm'"},
    {"|O", CAI_EUNSUPPORTED, "kind 'O'"},
    {"<f16", CAI_EUNSUPPORTED, "long double"},
    {"<c32", CAI_EUNSUPPORTED, "long double"},
    {">f16", CAI_EUNSUPPORTED, "long double"},
    /* Not NumPy types at all: malformed, not merely unexportable. */
    {"<f3", CAI_EINVAL, "no kind 'f' of 3 bytes"},
    {">f3", CAI_EINVAL, "no kind 'f' of 3 bytes"},
    {"<c4", CAI_EINVAL, "no kind 'c' of 4 bytes"},
    {"|b2", CAI_EINVAL, "no kind 'b' of 2 bytes"},
    {"<i16", CAI_EINVAL, "no kind 'i' of 16 bytes"},
    {"<f0", CAI_EINVAL, "no kind 'f' of 0 bytes"},
    {"<M4", CAI_EINVAL, "no valid size"},
    {"<M8[", CAI_EINVAL, "no valid size"},
    {"|O2", CAI_EINVAL, "no valid size"},
    {"<x4", CAI_EINVAL, "unknown kind 'x'"},
    {"", CAI_EINVAL, "byte order"},
    {"<", CAI_EINVAL, "byte order"},
    {"<f", CAI_EINVAL, "no size"},
    {"f", CAI_EINVAL, "no size"},
    {"<f4 ", CAI_EINVAL, "no valid size"},
    {"<f-4", CAI_EINVAL, "no valid size"},
    {"<f44444", CAI_EINVAL, "no kind 'f' of 44444 bytes"},
    {"<f4444444", CAI_EINVAL, "no valid size"},
    {"!f4", CAI_EINVAL, "unknown kind '!'"},
    {"<f\xc3\xa9", CAI_EINVAL, "ASCII"},
};

int main(void)
{
    size_t i;
    char out[CAI_TYPESTR_MAX];
    cai_error_t err;
    DLDataType t;

    plan(5 * (sizeof goods / sizeof goods[0]) +
         3 * (sizeof bads / sizeof bads[0]) + 8 + 6);

    for (i = 0; i < sizeof goods / sizeof goods[0]; i++) {
        const struct good *g = &goods[i];
        int rc = cai_typestr_parse(g->typestr, strlen(g->typestr), &t, &err);

        is_int(0, rc, "%s parses", g->typestr);
        is_int(g->code, t.code, "%s has the DLPack code %u", g->typestr,
               (unsigned)g->code);
        is_int(g->bits, t.bits, "%s has %u bits", g->typestr,
               (unsigned)g->bits);
        is_int(0, cai_typestr_format(t, out, &err), "%s formats back",
               g->typestr);
        is_string(g->formatted, out, "%s formats as %s", g->typestr,
                  g->formatted);
    }
    for (i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        const struct bad *b = &bads[i];
        int rc = cai_typestr_parse(b->typestr, strlen(b->typestr), &t, &err);

        is_int(b->status, rc, "'%s' is refused with status %d", b->typestr,
               b->status);
        is_string("typestr", err.field, "'%s': the error names the field",
                  b->typestr);
        contains(err.message, b->words, "'%s': the message says why",
                 b->typestr);
    }

    /* len bytes are read, no NUL needed; success clears the error. */
    {
        static const char unterminated[3] = {'<', 'f', '8'};
        static const char longer[] = "<i2junk";

        poison_err(&err);
        is_int(0,
               cai_typestr_parse(unterminated, sizeof unterminated, &t, &err),
               "an unterminated '<f8' parses");
        ok(t.code == kDLFloat && t.bits == 64 && t.lanes == 1,
           "... as float64, one lane");
        ok(err_cleared(&err), "... and clears the error struct");
        is_int(0, cai_typestr_parse(longer, 3, &t, &err),
               "only len bytes of '<i2junk' are read");
        ok(t.code == kDLInt && t.bits == 16, "... as int16");
        is_int(0, cai_typestr_parse("|u1", 3, &t, NULL), "err may be NULL");
    }

    /* DLPack types with no typestr are refused by name. */
    t.code = kDLBfloat;
    t.bits = 16;
    t.lanes = 1;
    is_int(CAI_EUNSUPPORTED, cai_typestr_format(t, out, &err),
           "bfloat16 has no typestr");
    contains(err.message, "bfloat16", "the message names bfloat16");
    t.code = kDLFloat8_e4m3fn;
    t.bits = 8;
    is_int(CAI_EUNSUPPORTED, cai_typestr_format(t, out, &err),
           "float8_e4m3fn has no typestr");
    contains(err.message, "float8_e4m3fn", "the message names float8_e4m3fn");
    t.code = kDLFloat4_e2m1fn;
    t.bits = 4;
    is_int(CAI_EUNSUPPORTED, cai_typestr_format(t, out, &err),
           "float4_e2m1fn (sub-byte) has no typestr");
    contains(err.message, "float4_e2m1fn", "the message names float4_e2m1fn");
    t.code = kDLFloat;
    t.bits = 32;
    t.lanes = 4;
    is_int(CAI_EUNSUPPORTED, cai_typestr_format(t, out, &err),
           "a 4-lane vector type has no typestr");
    contains(err.message, "x4", "the message names the lanes");
    return 0;
}
