/* NumPy type strings ("<f4", "|b1") and DLPack data types. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NATIVE_ORDER '>'
#define FOREIGN_ORDER '<'
#else
#define NATIVE_ORDER '<'
#define FOREIGN_ORDER '>'
#endif

int64_t cai_dtype_itemsize(DLDataType dtype)
{
    uint32_t bits = (uint32_t)dtype.bits * dtype.lanes;

    if (bits == 0 || bits % 8 != 0)
        return 0;
    return (int64_t)(bits / 8);
}

const char *cai_dtype_name(DLDataType dtype, char buf[32])
{
    static const char *const names[] = {
        "int", "uint", "float", "opaque handle", "bfloat", "complex", "bool",
        "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
        "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
        "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"};
    const char *base = dtype.code < sizeof names / sizeof names[0]
                           ? names[dtype.code] : "type code";

    /* The float8/6/4 names already say their width. */
    if (dtype.code >= kDLFloat8_e3m4 && dtype.code <= kDLFloat4_e2m1fn)
        snprintf(buf, 32, "%s", base);
    else if (dtype.code < sizeof names / sizeof names[0])
        snprintf(buf, 32, "%s%u", base, (unsigned)dtype.bits);
    else
        snprintf(buf, 32, "%s %u/%u bits", base, (unsigned)dtype.code,
                 (unsigned)dtype.bits);
    if (dtype.lanes != 1) {
        size_t n = strlen(buf);
        snprintf(buf + n, 32 - n, "x%u", (unsigned)dtype.lanes);
    }
    return buf;
}

int cai_typestr_parse(const char *s, size_t len, DLDataType *out,
                      cai_error_t *err)
{
    char order, kind;
    unsigned size = 0;
    size_t i;

    cai_ok(err);
    if (len < 3 || len > 4)
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "typestr '%.*s' is not a byte order, a kind and a "
                        "size in bytes (like '<f4')", (int)(len > 16 ? 16 : len), s);
    order = s[0];
    kind = s[1];
    for (i = 2; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || (i == 2 && s[i] == '0'))
            return cai_fail(err, CAI_EINVAL, "typestr",
                            "typestr '%.*s' has no valid size in bytes",
                            (int)len, s);
        size = size * 10 + (unsigned)(s[i] - '0');
    }
    /* One byte has no byte order: NumPy reads '>u1' as '|u1'. */
    if (order == FOREIGN_ORDER && size != 1)
        return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                        "typestr '%.*s' is not in native byte order; "
                        "DLPack holds native byte order only", (int)len, s);
    if (order != NATIVE_ORDER && order != FOREIGN_ORDER && order != '|' &&
        order != '=')
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "typestr '%.*s' has byte order '%c'; expected '<', "
                        "'>', '|' or '='", (int)len, s, order);

    out->lanes = 1;
    out->bits = (uint8_t)(size * 8);
    switch (kind) {
    case 'b':
        if (size == 1) {
            out->code = kDLBool;
            return 0;
        }
        break;
    case 'i':
    case 'u':
        if (size == 1 || size == 2 || size == 4 || size == 8) {
            out->code = kind == 'i' ? kDLInt : kDLUInt;
            return 0;
        }
        break;
    case 'f':
        if (size == 2 || size == 4 || size == 8) {
            out->code = kDLFloat;
            return 0;
        }
        break;
    case 'c':
        if (size == 8 || size == 16) {
            out->code = kDLComplex;
            return 0;
        }
        break;
    case 'V': case 'O': case 'U': case 'S': case 'M': case 'm': case 'a':
        return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                        "typestr '%.*s' has kind '%c', which DLPack cannot "
                        "express (no void, object, string or datetime types)",
                        (int)len, s, kind);
    default:
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "typestr '%.*s' has unknown kind '%c'", (int)len, s,
                        kind);
    }
    return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                    "typestr '%.*s': kind '%c' has no DLPack type of %u bytes",
                    (int)len, s, kind, size);
}

int cai_typestr_format(DLDataType dtype, char out[CAI_TYPESTR_MAX],
                       cai_error_t *err)
{
    char kind = 0;
    char name[32];
    unsigned bits = dtype.bits;

    cai_ok(err);
    if (dtype.lanes == 1) {
        switch (dtype.code) {
        case kDLInt:
        case kDLUInt:
            if (bits == 8 || bits == 16 || bits == 32 || bits == 64)
                kind = dtype.code == kDLInt ? 'i' : 'u';
            break;
        case kDLFloat:
            if (bits == 16 || bits == 32 || bits == 64)
                kind = 'f';
            break;
        case kDLComplex:
            if (bits == 64 || bits == 128)
                kind = 'c';
            break;
        case kDLBool:
            if (bits == 8)
                kind = 'b';
            break;
        default:
            break;
        }
    }
    if (kind == 0) {
        out[0] = '\0';
        return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                        "DLPack type %s has no NumPy typestr, so CAI cannot "
                        "describe it", cai_dtype_name(dtype, name));
    }
    /* By hand: snprintf costs more than a whole hand-over (sizes 1-16). */
    {
        unsigned size = bits / 8;
        char *p = out;

        *p++ = bits == 8 ? '|' : NATIVE_ORDER;
        *p++ = kind;
        if (size >= 10)
            *p++ = (char)('0' + size / 10);
        *p++ = (char)('0' + size % 10);
        *p = '\0';
    }
    return 0;
}
