/* caibridge.h in strict ISO C99 (-std=c99 -pedantic-errors when the
 * compiler knows them): the header promises C99, not GNU C. */
#include <string.h>

#include "caibridge.h"
#include "tap/basic.h"

static void count_release(void *owner)
{
    ++*(int *)owner;
}

int main(void)
{
    static double data[8];
    cai_desc_t desc;
    cai_desc_t back;
    DLManagedTensor *t = NULL;
    DLDataType type;
    char typestr[CAI_TYPESTR_MAX];
    int released = 0;

    plan(6);
    ok(cai_typestr_parse("<f8", 3, &type, NULL) == 0, "C99: '<f8' parses");
    ok(cai_typestr_format(type, typestr, NULL) == 0 &&
           strcmp(typestr, "<f8") == 0,
       "C99: and formats back");
    memset(&desc, 0, sizeof desc);
    desc.data = data;
    desc.ndim = 1;
    desc.version = 2;
    desc.dtype = type;
    desc.device.device_type = kDLCPU;
    desc.shape[0] = 8;
    ok(cai_desc_validate(&desc, NULL) == 0, "C99: the descriptor is valid");
    ok(cai_desc_to_dlpack(&desc, 0, &released, count_release, &t, NULL) == 0 &&
           t != NULL && released == 0,
       "C99: desc -> legacy, the owner kept");
    ok(t != NULL && cai_desc_from_dlpack(t, &back, NULL) == 0 &&
           back.data == data && back.shape[0] == 8 && !back.has_strides,
       "C99: legacy -> desc");
    if (t != NULL)
        t->deleter(t);
    is_int(1, released, "C99: the deleter released the owner once");
    return 0;
}
