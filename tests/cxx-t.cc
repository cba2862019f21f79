// caibridge.h from C++ (C++11 or later): it must compile warning-free and
// link against the C library; one conversion each way runs here.
#include <cstdint>
#include <type_traits>

#include "caibridge.h"
#include "tap/basic.h"
#include "test-util.h"

static_assert(sizeof(DLDataType) == 4, "DLDataType is 4 bytes");
static_assert(sizeof(DLDevice) == 8, "DLDevice is 8 bytes");
static_assert(sizeof(DLDeviceType) == 4, "DLDeviceType is int32_t");
static_assert(std::is_standard_layout<cai_desc_t>::value,
              "cai_desc_t is standard layout");
static_assert(std::is_trivially_copyable<cai_desc_t>::value,
              "cai_desc_t is trivially copyable");
static_assert(std::is_standard_layout<DLManagedTensorVersioned>::value,
              "DLManagedTensorVersioned is standard layout");

extern "C" {
static void count_release(void *owner)
{
    ++*static_cast<int *>(owner);
}
}

int main()
{
    float data[12] = {};
    cai_desc_t desc;
    cai_desc_t back;
    cai_error_t err;
    DLManagedTensorVersioned *t = nullptr;
    DLManagedTensor *l = nullptr;
    int released = 0;

    plan(10);
    float_desc(&desc, data, 2, 3, 4);
    desc.has_strides = 1;
    desc.strides[0] = 4;
    desc.strides[1] = 12;

    is_int(CAI_OK, cai_desc_to_dlpack_versioned(&desc, CAI_OPT_IS_COPIED,
                                                &released, count_release, &t,
                                                &err),
           "C++: desc -> versioned");
    ok(t != nullptr && t->dl_tensor.strides[1] == 3,
       "C++: byte strides became element strides");
    ok(t != nullptr && (t->flags & DLPACK_FLAG_BITMASK_IS_COPIED) != 0,
       "C++: IS_COPIED set");
    is_int(CAI_OK, t ? cai_desc_from_dlpack_versioned(t, &back, &err) : -99,
           "C++: versioned -> desc");
    ok(back.has_strides && back.strides[1] == 12 && back.data == data,
       "C++: the same descriptor comes back");
    if (t != nullptr)
        t->deleter(t);
    is_int(1, released, "C++: released once");

    desc.readonly = 1;
    is_int(CAI_EREADONLY,
           cai_desc_to_dlpack(&desc, 0, &released, count_release, &l, &err),
           "C++: read-only to legacy refused");
    ok(l == nullptr, "C++: *out is nullptr");
    is_string("data", err.field, "C++: the error names data");
    is_int(2, released, "C++: released on failure too");
    return 0;
}
