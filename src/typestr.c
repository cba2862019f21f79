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
    static const char *const names[] = {"int",
                                        "uint",
                                        "float",
                                        "opaque handle",
                                        "bfloat",
                                        "complex",
                                        "bool",
                                        "float8_e3m4",
                                        "float8_e4m3",
                                        "float8_e4m3b11fnuz",
                                        "float8_e4m3fn",
                                        "float8_e4m3fnuz",
                                        "float8_e5m2",
                                        "float8_e5m2fnuz",
                                        "float8_e8m0fnu",
                                        "float6_e2m3fn",
                                        "float6_e3m2fn",
                                        "float4_e2m1fn"};
    const char *base = dtype.code < sizeof names / sizeof names[0]
                           ? names[dtype.code]
                           : "type code";

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

/* A NumPy type that DLPack has no code for: well formed, not exportable. */
static int unexportable(const char *s, size_t len, char kind, cai_error_t *err)
{
    return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                    "typestr '%.*s' has kind '%c', which DLPack cannot "
                    "express (no void, object, string or datetime types)",
                    (int)(len > 16 ? 16 : len), s, kind);
}

/*
 * NumPy's reading of an array-interface typestr: an optional byte order
 * ('<', '>', '|' or '='), a kind and a size in bytes; kinds whose size
 * NumPy implies (O, M, m and the flexible V, S, a, U) may omit it, and M/m
 * take a unit in brackets.  What NumPy reads but DLPack cannot hold is
 * CAI_EUNSUPPORTED; what NumPy would not read, and a kind of b, i, u, f or
 * c without its size (NumPy takes those as one-letter type codes), is
 * CAI_EINVAL.  '>' is foreign only for items of more than one byte.
 */
int cai_typestr_parse(const char *s, size_t len, DLDataType *out,
                      cai_error_t *err)
{
    int shown = (int)(len > 16 ? 16 : len);
    char order = 0, kind;
    unsigned size = 0;
    size_t i, pos = 0, digits;

    if (CAI_UNLIKELY(s == NULL || out == NULL))
        return cai_null_arg(err, s == NULL ? "typestr" : "out");
    cai_ok(err);
    for (i = 0; i < len; i++) {
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return cai_fail(err, CAI_EINVAL, "typestr",
                            "typestr is not printable ASCII (like '<f4')");
    }
    if (len > 0 && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '='))
        order = s[pos++];
    if (pos == len)
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "typestr '%.*s' is not a byte order, a kind and a "
                        "size in bytes (like '<f4')",
                        shown, s);
    kind = s[pos++];
    for (digits = 0; pos < len && s[pos] >= '0' && s[pos] <= '9';
         pos++, digits++) {
        if (digits == 6)
            return cai_fail(err, CAI_EINVAL, "typestr",
                            "typestr '%.*s' has no valid size in bytes", shown,
                            s);
        size = size * 10 + (unsigned)(s[pos] - '0');
    }

    switch (kind) {
    case 'M':
    case 'm':
        /* datetime64 / timedelta64: 8 bytes, an optional [unit]. */
        if ((digits == 0 || size == 8) &&
            (pos == len ||
             (s[pos] == '[' && len - pos >= 3 && s[len - 1] == ']')))
            return unexportable(s, len, kind, err);
        break;
    case 'O':
        if (pos == len && (digits == 0 || size == 4 || size == 8))
            return unexportable(s, len, kind, err);
        break;
    case 'V':
    case 'S':
    case 'a':
    case 'U':
        if (pos == len)
            return unexportable(s, len, kind, err);
        break;
    case 'b':
    case 'i':
    case 'u':
    case 'f':
    case 'c':
        if (pos != len || digits == 0)
            break;
        out->lanes = 1;
        out->bits = (uint8_t)(size * 8);
        if (kind == 'b' && size == 1)
            out->code = kDLBool;
        else if ((kind == 'i' || kind == 'u') &&
                 (size == 1 || size == 2 || size == 4 || size == 8))
            out->code = kind == 'i' ? kDLInt : kDLUInt;
        else if (kind == 'f' && (size == 2 || size == 4 || size == 8))
            out->code = kDLFloat;
        else if (kind == 'c' && (size == 8 || size == 16))
            out->code = kDLComplex;
        else if ((kind == 'f' && size == 16) || (kind == 'c' && size == 32))
            /* long double and its complex: NumPy types, not IEEE ones */
            return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                            "typestr '%.*s' (long double) has no DLPack type",
                            shown, s);
        else
            return cai_fail(err, CAI_EINVAL, "typestr",
                            "typestr '%.*s': NumPy has no kind '%c' of %u "
                            "bytes",
                            shown, s, kind, size);
        /* One byte has no byte order: NumPy reads '>u1' as '|u1'. */
        if (order == FOREIGN_ORDER && size != 1)
            return cai_fail(err, CAI_EUNSUPPORTED, "typestr",
                            "typestr '%.*s' is not in native byte order; "
                            "DLPack holds native byte order only",
                            shown, s);
        return 0;
    default:
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "typestr '%.*s' has unknown kind '%c'", shown, s,
                        kind);
    }
    if (pos == len && digits == 0)
        return cai_fail(err, CAI_EINVAL, "typestr",
                        "typestr '%.*s' has no size in bytes (like '<f4')",
                        shown, s);
    return cai_fail(err, CAI_EINVAL, "typestr",
                    "typestr '%.*s' has no valid size in bytes", shown, s);
}

int cai_typestr_format(DLDataType dtype, char out[CAI_TYPESTR_MAX],
                       cai_error_t *err)
{
    char kind = 0;
    char name[32];
    unsigned bits = dtype.bits;

    if (CAI_UNLIKELY(out == NULL))
        return cai_null_arg(err, "out");
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
                        "describe it",
                        cai_dtype_name(dtype, name));
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
