/*
 * libFuzzer target for the core conversions.
 *
 * The input's first byte picks a path.  Even: the bytes become a cai_desc_t
 * that is converted to both DLPack structs and back.  Odd: they become a
 * DLManagedTensorVersioned or DLManagedTensor, as a foreign producer might
 * hand over, that is read into a descriptor and exported again.  Every
 * promise of caibridge.h that can be checked from outside is checked, and a
 * broken one aborts so that libFuzzer keeps the input.
 *
 * tests/fuzz/make-corpus.py writes the seed corpus in this input format.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caibridge.h"

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz-convert: %s:%d: %s: ", __FILE__, __LINE__, \
                    #cond);                                                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* Reads the input front to back; past the end every byte reads as 0, so
 * every input decodes to something. */
typedef struct {
    const uint8_t *p;
    size_t left;
} reader;

static uint8_t take_byte(reader *r)
{
    if (r->left == 0)
        return 0;
    r->left--;
    return *r->p++;
}

static uint64_t take_u64(reader *r)
{
    uint64_t v = 0;
    int i;

    for (i = 0; i < 8; i++)
        v |= (uint64_t)take_byte(r) << (8 * i);
    return v;
}

/*
 * A byte chooses between a small value, scaled or not, and 8 raw bytes:
 * 00xxxxxx is x; 01xxxxxx is x * scale; 10xxxxxx is -x * scale; 11...... is
 * the next 8 bytes.  Small values reach the interesting layouts quickly and
 * raw ones the overflow checks.
 */
static int64_t take_int(reader *r, int64_t scale)
{
    uint8_t b = take_byte(r);
    int64_t x = b & 0x3f;

    switch (b >> 6) {
    case 0:
        return x;
    case 1:
        return x * scale;
    case 2:
        return -x * scale;
    default:
        return (int64_t)take_u64(r);
    }
}

/* The owner handed to a conversion: counts the calls to release. */
typedef struct {
    int releases;
} owner_t;

static void count_release(void *owner)
{
    ((owner_t *)owner)->releases++;
}

static void check_error(int rc, const cai_error_t *err, const char *what)
{
    CHECK(rc < 0 && rc >= CAI_ECUDA, "%s: status %d is not a cai_status", what,
          rc);
    CHECK(err->status == rc, "%s: err.status %d but returned %d", what,
          err->status, rc);
    CHECK(err->message[0] != '\0', "%s: status %d with an empty message", what,
          rc);
    CHECK(memchr(err->message, '\0', sizeof err->message) != NULL &&
              memchr(err->field, '\0', sizeof err->field) != NULL,
          "%s: message or field not terminated", what);
}

static int same_dtype(DLDataType a, DLDataType b)
{
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static int64_t count_elements(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    int i;

    for (i = 0; i < ndim; i++)
        if (shape[i] == 0)
            return 0;
    for (i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n))
            return -1;
    return n;
}

/*
 * C order computed here, not by cai_is_c_contiguous (the function under
 * test), and another way: front to back by division, where the library
 * multiplies back to front, in 128 bits.  An array with no element is in C
 * order; else each axis longer than 1 steps over the bytes of all later
 * axes.  Called only for layouts the library accepted, whose element count
 * fits in 64 bits.
 */
static int in_c_order(int ndim, const int64_t *shape, const int64_t *strides,
                      int64_t itemsize)
{
    int64_t rest = count_elements(ndim, shape);
    int i;

    if (strides == NULL || rest == 0)
        return 1;
    for (i = 0; i < ndim; i++) {
        rest /= shape[i]; /* the elements of one step along axis i */
        if (shape[i] > 1 && strides[i] != (__int128)rest * itemsize)
            return 0;
    }
    return 1;
}

/*
 * The documented normalizations of a round trip: version becomes 3, mask and
 * stream are dropped (DLPack carries neither), strides are None exactly when
 * the layout is C-contiguous, and an axis of length 0 or 1 may come back
 * with any stride.  Everything else must be identical.
 */
static void check_same_desc(const cai_desc_t *a, const cai_desc_t *b,
                            int readonly_kept, const char *what)
{
    int64_t itemsize = cai_dtype_itemsize(a->dtype);
    int contiguous, i;

    CHECK(b->data == a->data, "%s: data %p became %p", what, a->data, b->data);
    CHECK(b->ndim == a->ndim, "%s: ndim %d became %d", what, a->ndim, b->ndim);
    CHECK(same_dtype(a->dtype, b->dtype), "%s: dtype changed", what);
    CHECK(b->device.device_type == a->device.device_type &&
              b->device.device_id == a->device.device_id,
          "%s: device changed", what);
    CHECK(b->version == 3, "%s: version %d, expected 3", what, b->version);
    CHECK(!b->has_mask && !b->has_stream, "%s: mask or stream appeared", what);
    CHECK(b->readonly == (readonly_kept ? a->readonly : 0),
          "%s: readonly %d became %d", what, a->readonly, b->readonly);
    for (i = 0; i < a->ndim; i++)
        CHECK(b->shape[i] == a->shape[i], "%s: shape[%d] %lld became %lld",
              what, i, (long long)a->shape[i], (long long)b->shape[i]);
    contiguous = in_c_order(a->ndim, a->shape,
                            a->has_strides ? a->strides : NULL, itemsize);
    CHECK(b->has_strides == !contiguous,
          "%s: has_strides %d for a layout that is %sC-contiguous", what,
          b->has_strides, contiguous ? "" : "not ");
    if (b->has_strides)
        for (i = 0; i < a->ndim; i++)
            CHECK(a->shape[i] <= 1 || b->strides[i] == a->strides[i],
                  "%s: strides[%d] %lld became %lld", what, i,
                  (long long)a->strides[i], (long long)b->strides[i]);
}

/* The exported tensor must address exactly the bytes the descriptor does. */
static void check_tensor_matches(const cai_desc_t *d, const DLTensor *t,
                                 const char *what)
{
    int64_t itemsize = cai_dtype_itemsize(d->dtype);
    int64_t n = count_elements(d->ndim, d->shape);
    int64_t step = itemsize;
    int i;

    CHECK(t->data == d->data && t->byte_offset == 0, "%s: data moved", what);
    CHECK(t->ndim == d->ndim, "%s: ndim %d became %d", what, d->ndim,
          (int)t->ndim);
    CHECK(same_dtype(t->dtype, d->dtype), "%s: dtype changed", what);
    CHECK(t->device.device_type == d->device.device_type &&
              t->device.device_id == d->device.device_id,
          "%s: device changed", what);
    /* DLPack 1.2: strides are never NULL when ndim > 0. */
    CHECK((t->shape != NULL) == (d->ndim > 0) &&
              (t->strides != NULL) == (d->ndim > 0),
          "%s: shape %p strides %p for ndim %d", what, (void *)t->shape,
          (void *)t->strides, d->ndim);
    for (i = 0; i < d->ndim; i++)
        CHECK(t->shape[i] == d->shape[i], "%s: shape[%d] changed", what, i);
    if (n == 0)
        return; /* no element is addressed, so any stride is right */
    for (i = d->ndim - 1; i >= 0; i--) {
        int64_t want = d->has_strides ? d->strides[i] : step;

        if (d->shape[i] > 1)
            CHECK(t->strides[i] * itemsize == want,
                  "%s: element stride %lld on axis %d does not give %lld "
                  "bytes",
                  what, (long long)t->strides[i], i, (long long)want);
        if (!d->has_strides && d->shape[i] > 1)
            step *= d->shape[i];
    }
}

/*
 * A tensor we made reads back when DLPack defines its type code (bfloat16,
 * float8 and packed float4 included: only the CAI and array interfaces
 * need a typestr, and a packed sub-byte one was only made C-contiguous);
 * else it is refused, naming the dtype.
 */
static int reads_back(DLDataType dtype)
{
    return dtype.code <= kDLFloat4_e2m1fn;
}

static void check_not_read(int rc, const cai_error_t *err)
{
    check_error(rc, err, "reading a type DLPack does not define");
    CHECK(rc == CAI_EUNSUPPORTED && strcmp(err->field, "dtype") == 0,
          "a type that cannot be read refused with status %d for field "
          "'%s': %s",
          rc, err->field, err->message);
}

/* parse(format(parse(s))) == parse(s): a typestr we accept survives. */
static void check_typestr(const char *s, size_t len)
{
    DLDataType a, b;
    char again[CAI_TYPESTR_MAX];
    cai_error_t err;
    int rc = cai_typestr_parse(s, len, &a, &err);

    if (rc != 0) {
        check_error(rc, &err, "cai_typestr_parse");
        return;
    }
    CHECK(cai_dtype_itemsize(a) > 0, "parsed typestr has no item size");
    rc = cai_typestr_format(a, again, &err);
    CHECK(rc == 0, "cannot format a parsed typestr: %s", err.message);
    CHECK(memchr(again, '\0', sizeof again) != NULL, "format unterminated");
    rc = cai_typestr_parse(again, strlen(again), &b, &err);
    CHECK(rc == 0 && same_dtype(a, b), "typestr '%s' does not parse back",
          again);
}

static void decode_desc(reader *r, cai_desc_t *d, unsigned *options,
                        int *release_null, int *legacy)
{
    uint8_t f1 = take_byte(r), f2 = take_byte(r), b;
    int64_t scale;
    int i, n;

    memset(d, 0, sizeof *d);
    d->has_strides = f1 & 1;
    d->has_mask = (f1 >> 1) & 1;
    d->has_stream = (f1 >> 2) & 1;
    d->readonly = (f1 >> 3) & 1;
    *legacy = (f1 >> 6) & 1;
    *options = ((f1 >> 7) & 1 ? CAI_OPT_LEGACY_READONLY_OK : 0) |
               (f2 & 1 ? CAI_OPT_IS_COPIED : 0);
    *release_null = (f2 >> 1) & 1;
    switch ((f2 >> 2) & 3) {
    case 0:
        break; /* device not known */
    case 1:
        d->device.device_type = kDLCPU;
        break;
    case 2:
        d->device.device_type = kDLCUDA;
        d->device.device_id = take_byte(r);
        break;
    default:
        d->device.device_type = (DLDeviceType)(int32_t)take_u64(r);
        d->device.device_id = (int32_t)take_u64(r);
        break;
    }
    b = take_byte(r);
    d->version = b & 0x80 ? (int8_t)b : b & 3;
    d->ndim = (int8_t)take_byte(r);

    if (f1 & 0x20) {
        /* A raw type, as a foreign tensor might carry. */
        d->dtype.code = take_byte(r);
        d->dtype.bits = take_byte(r);
        d->dtype.lanes = take_byte(r);
    } else {
        char typestr[8];
        size_t len = take_byte(r) % 8;
        cai_error_t err;

        for (i = 0; i < (int)len; i++)
            typestr[i] = (char)take_byte(r);
        check_typestr(typestr, len);
        if (cai_typestr_parse(typestr, len, &d->dtype, &err) != 0)
            d->dtype.code = kDLFloat, d->dtype.bits = 32, d->dtype.lanes = 1;
    }
    if (d->has_stream)
        d->stream = (intptr_t)take_int(r, 1);
    if (!(f1 & 0x10)) {
        uint64_t p = take_u64(r);
        d->data = (void *)(uintptr_t)(p != 0 ? p : 0x1000);
    }
    scale = cai_dtype_itemsize(d->dtype);
    if (scale == 0)
        scale = 1;
    n = d->ndim < 0 ? 0 : d->ndim > CAI_MAX_NDIM ? CAI_MAX_NDIM : d->ndim;
    for (i = 0; i < n; i++)
        d->shape[i] = take_int(r, 1);
    if (d->has_strides)
        for (i = 0; i < n; i++)
            d->strides[i] = take_int(r, scale);
}

/*
 * cai_layout_extent against the same bounds in 128-bit arithmetic, where
 * nothing a 64-bit layout gives can overflow: equal when they fit in
 * int64_t, else refused.  The offset is the data pointer's bits, so random
 * inputs reach offsets near 2^63 too.
 */
static void check_extent(const cai_desc_t *d)
{
    const int64_t *strides = d->has_strides ? d->strides : NULL;
    int64_t itemsize = cai_dtype_itemsize(d->dtype);
    int64_t offset = (int64_t)(uintptr_t)d->data, lo, hi;
    __int128 count = 1, below = 0, above = 0;
    int fits = 1, i, rc;
    cai_error_t err;

    if (d->ndim < 0 || d->ndim > CAI_MAX_NDIM || itemsize <= 0)
        fits = 0;
    for (i = 0; fits && i < d->ndim; i++)
        if (d->shape[i] < 0)
            fits = 0;
    for (i = 0; fits && i < d->ndim; i++) {
        /* Capped above 2^63: the count only has to be known to overflow. */
        if (count <= INT64_MAX)
            count *= d->shape[i];
        if (d->shape[i] == 0) {
            count = 0;
            break;
        }
    }
    if (fits && count > INT64_MAX)
        fits = 0;
    if (fits && count == 0)
        above = below = 0; /* the empty range at the offset */
    if (fits && count > 0) {
        if (strides == NULL) {
            above = count * itemsize;
        } else {
            for (i = 0; i < d->ndim; i++) {
                __int128 span = (__int128)strides[i] * (d->shape[i] - 1);

                if (d->shape[i] <= 1)
                    continue;
                if (span < 0)
                    below += span;
                else
                    above += span;
            }
            above += itemsize;
        }
    }
    /* The extent relative to the first element, and then moved by the
     * offset, must both fit, as cai_layout_extent documents. */
    if (fits && (below < INT64_MIN || above > INT64_MAX))
        fits = 0;
    below += offset;
    above += offset;
    if (fits && (below < INT64_MIN || above > INT64_MAX))
        fits = 0;
    rc = cai_layout_extent(d->ndim, d->shape, strides, itemsize, offset, &lo,
                           &hi, &err);
    if (rc != 0) {
        check_error(rc, &err, "cai_layout_extent");
        CHECK(rc == CAI_EINVAL, "cai_layout_extent gave status %d", rc);
        CHECK(lo == 0 && hi == 0, "a refused extent left [%lld, %lld)",
              (long long)lo, (long long)hi);
        CHECK(!fits, "refused an extent that fits: %s", err.message);
        return;
    }
    CHECK(fits, "an extent past 64 bits was computed as [%lld, %lld)",
          (long long)lo, (long long)hi);
    CHECK(lo == (int64_t)below && hi == (int64_t)above,
          "extent [%lld, %lld), expected [%lld, %lld)", (long long)lo,
          (long long)hi, (long long)below, (long long)above);
    CHECK(lo <= offset && hi >= offset && (count == 0) == (lo == hi),
          "extent [%lld, %lld) around offset %lld", (long long)lo,
          (long long)hi, (long long)offset);
}

/* A refused export: a proper error, *out left NULL, and the owner released
 * once when there is a release to call. */
static void check_refused(int rc, const cai_error_t *err, const void *out,
                          const owner_t *owner, int released, const char *what)
{
    check_error(rc, err, what);
    CHECK(out == NULL, "%s: refused conversion left *out set", what);
    CHECK(owner->releases == released,
          "%s: refused conversion released the owner %d times", what,
          owner->releases);
}

/* Our own export read back: the same descriptor, or refused for a type
 * without whole-byte elements. */
static void check_read_back(int rc, const cai_error_t *err,
                            const cai_desc_t *d, const cai_desc_t *back,
                            int readonly_kept, const char *what)
{
    if (reads_back(d->dtype)) {
        CHECK(rc == 0, "%s: our own tensor does not read back: %s", what,
              err->message);
        check_same_desc(d, back, readonly_kept, what);
    } else {
        check_not_read(rc, err);
    }
}

/* A descriptor to both DLPack structs and back. */
static void fuzz_desc(reader *r)
{
    cai_desc_t d, back;
    unsigned options;
    int release_null, legacy, rc_valid, rc;
    cai_error_t err, verr;
    owner_t owner = {0};
    cai_release_fn release;

    decode_desc(r, &d, &options, &release_null, &legacy);
    release = release_null ? NULL : count_release;
    check_extent(&d);

    rc_valid = cai_desc_validate(&d, &verr);
    if (rc_valid != 0)
        check_error(rc_valid, &verr, "cai_desc_validate");
    else
        CHECK(verr.status == 0 && verr.message[0] == '\0',
              "validate succeeded but left an error behind");

    {
        DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)&owner;

        rc = cai_desc_to_dlpack_versioned(&d, options, &owner, release, &t,
                                          &err);
        if (rc != 0) {
            check_refused(rc, &err, t, &owner, release != NULL,
                          "cai_desc_to_dlpack_versioned");
            /* Only the unknown device is checked beyond validate. */
            CHECK(d.device.device_type == 0 || rc_valid == rc,
                  "validate said %d, the conversion %d", rc_valid, rc);
        } else {
            CHECK(rc_valid == 0,
                  "converted a descriptor validate refused: "
                  "%s",
                  verr.message);
            CHECK(d.device.device_type != 0, "converted an unknown device");
            CHECK(t != NULL && owner.releases == 0,
                  "success but out %p, %d releases", (void *)t,
                  owner.releases);
            CHECK(t->version.major == CAIBRIDGE_DLPACK_MAJOR &&
                      t->version.minor == CAIBRIDGE_DLPACK_MINOR,
                  "version %u.%u", t->version.major, t->version.minor);
            CHECK(t->manager_ctx == &owner && t->deleter != NULL,
                  "manager_ctx or deleter wrong");
            CHECK(t->flags ==
                      ((d.readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                       (options & CAI_OPT_IS_COPIED
                            ? DLPACK_FLAG_BITMASK_IS_COPIED
                            : 0)),
                  "flags %llx", (unsigned long long)t->flags);
            check_tensor_matches(&d, &t->dl_tensor, "versioned export");
            rc = cai_desc_from_dlpack_versioned(t, &back, &err);
            check_read_back(rc, &err, &d, &back, 1, "versioned round trip");
            t->deleter(t);
            CHECK(owner.releases == (release ? 1 : 0),
                  "deleter released the owner %d times", owner.releases);
        }
    }

    if (!legacy)
        return;
    owner.releases = 0;
    {
        DLManagedTensor *t = (DLManagedTensor *)&owner;
        int refuse_ro = d.readonly && !(options & CAI_OPT_LEGACY_READONLY_OK);

        rc = cai_desc_to_dlpack(&d, options, &owner, release, &t, &err);
        if (rc != 0) {
            check_refused(rc, &err, t, &owner, release != NULL,
                          "cai_desc_to_dlpack");
            CHECK(rc_valid != 0 || d.device.device_type == 0 || refuse_ro,
                  "legacy refused a valid descriptor: %s", err.message);
        } else {
            CHECK(rc_valid == 0 && !refuse_ro,
                  "legacy converted what it must refuse");
            CHECK(t != NULL && owner.releases == 0 && t->manager_ctx == &owner,
                  "legacy success but out %p, %d releases", (void *)t,
                  owner.releases);
            check_tensor_matches(&d, &t->dl_tensor, "legacy export");
            rc = cai_desc_from_dlpack(t, &back, &err);
            check_read_back(rc, &err, &d, &back, 0, "legacy round trip");
            t->deleter(t);
            CHECK(owner.releases == (release ? 1 : 0),
                  "legacy deleter released the owner %d times",
                  owner.releases);
        }
    }
}

static void never_called(DLManagedTensorVersioned *self)
{
    (void)self;
    CHECK(0, "the library called a foreign tensor's deleter");
}

/* A foreign tensor, read into a descriptor and exported again. */
static void fuzz_tensor(reader *r, uint8_t mode)
{
    DLManagedTensorVersioned v;
    DLTensor *t = &v.dl_tensor;
    cai_desc_t d;
    cai_error_t err;
    int64_t *shape = NULL, *strides = NULL, itemsize;
    int legacy = (mode >> 1) & 1, rc, i, n;
    uint8_t b;

    memset(&v, 0, sizeof v);
    v.version.major = take_byte(r);
    v.version.minor = take_byte(r);
    v.flags = take_byte(r);
    if (v.flags & 0x80)
        v.flags = take_u64(r);
    v.deleter = never_called;
    t->dtype.code = take_byte(r);
    t->dtype.bits = take_byte(r);
    b = take_byte(r);
    t->dtype.lanes = b < 0xf0    ? 1
                     : b == 0xff ? (uint16_t)take_u64(r)
                                 : b - 0xf0;
    b = take_byte(r);
    t->device.device_type =
        (DLDeviceType)(b < 0xf0 ? b % 20 : (int32_t)take_u64(r));
    t->device.device_id = (int8_t)take_byte(r);
    t->ndim = (int8_t)take_byte(r);
    if (!(mode & 4))
        t->data = (void *)(uintptr_t)take_u64(r);
    t->byte_offset = (uint64_t)take_int(r, 1);
    itemsize = cai_dtype_itemsize(t->dtype);

    n = t->ndim < 0 ? 0 : t->ndim;
    if (v.version.major != CAIBRIDGE_DLPACK_MAJOR && !legacy) {
        /* Only the version may be read: freed arrays make ASan say so. */
        t->shape = malloc(sizeof *shape);
        t->strides = malloc(sizeof *strides);
        free(t->shape);
        free(t->strides);
        rc = cai_desc_from_dlpack_versioned(&v, &d, &err);
        CHECK(rc == CAI_EVERSION, "major version %u gave %d", v.version.major,
              rc);
        check_error(rc, &err, "cai_desc_from_dlpack_versioned");
        return;
    }
    /* Exact-size arrays, so reading past ndim is an ASan report. */
    if (n > 0 && n <= 128 && !(mode & 8)) {
        shape = malloc((size_t)n * sizeof *shape);
        for (i = 0; i < n; i++)
            shape[i] = take_int(r, 1);
    }
    if (n > 0 && n <= 128 && !(mode & 16)) {
        strides = malloc((size_t)n * sizeof *strides);
        for (i = 0; i < n; i++)
            strides[i] = take_int(r, 1);
    }
    t->shape = shape;
    t->strides = strides;

    if (legacy) {
        DLManagedTensor l;

        memset(&l, 0, sizeof l);
        l.dl_tensor = *t;
        rc = cai_desc_from_dlpack(&l, &d, &err);
    } else {
        rc = cai_desc_from_dlpack_versioned(&v, &d, &err);
    }
    if (rc != 0) {
        check_error(rc, &err, "reading a foreign tensor");
        goto out;
    }
    CHECK(err.status == 0 && err.message[0] == '\0',
          "reading succeeded but left an error behind");
    rc = cai_desc_validate(&d, &err);
    CHECK(rc == 0, "a tensor we read does not validate: %s", err.message);
    CHECK(d.ndim == t->ndim && same_dtype(d.dtype, t->dtype) &&
              d.device.device_type == t->device.device_type &&
              d.device.device_id == t->device.device_id,
          "ndim, dtype or device changed on reading");
    CHECK(d.data == (t->data == NULL ? NULL
                                     : (void *)((uintptr_t)t->data +
                                                (uintptr_t)t->byte_offset)),
          "data + byte_offset not folded into the pointer");
    CHECK(d.readonly == (!legacy && (v.flags & DLPACK_FLAG_BITMASK_READ_ONLY)),
          "readonly %d for flags %llx", d.readonly,
          (unsigned long long)v.flags);
    for (i = 0; i < d.ndim; i++)
        CHECK(d.shape[i] == t->shape[i], "shape[%d] changed on reading", i);
    if (d.has_strides) {
        CHECK(strides != NULL, "strides appeared from NULL");
        for (i = 0; i < d.ndim; i++)
            CHECK(d.shape[i] <= 1 || d.strides[i] == strides[i] * itemsize,
                  "strides[%d] in bytes is not elements * itemsize", i);
    }

    /* What we read must export again, to the same layout. */
    if (d.device.device_type != 0) {
        DLManagedTensorVersioned *again;
        owner_t owner = {0};

        rc = cai_desc_to_dlpack_versioned(&d, 0, &owner, count_release, &again,
                                          &err);
        CHECK(rc == 0, "a tensor we read does not export: %s", err.message);
        check_tensor_matches(&d, &again->dl_tensor, "re-export");
        if (strides != NULL && count_elements(d.ndim, d.shape) > 0)
            for (i = 0; i < d.ndim; i++)
                CHECK(d.shape[i] <= 1 ||
                          again->dl_tensor.strides[i] == strides[i],
                      "re-exported element stride %d changed", i);
        again->deleter(again);
        CHECK(owner.releases == 1, "re-export released %d times",
              owner.releases);
    }
out:
    free(shape);
    free(strides);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    uint8_t mode = take_byte(&r);

    if (mode & 1)
        fuzz_tensor(&r, mode);
    else
        fuzz_desc(&r);
    return 0;
}
