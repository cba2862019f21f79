/* Expands tests/abi-list.h into the initialisers of a cai_abi_entry table;
 * included inside the braces of the table's definition. */
#define SIZE(T) {"sizeof(" #T ")", (long long)sizeof(T)},
#define FIELD(T, f)                                          \
    {"offsetof(" #T ", " #f ")", (long long)offsetof(T, f)}, \
        {"sizeof(" #T "." #f ")", (long long)sizeof(((T *)0)->f)},
#define VALUE(v) {#v, (long long)(v)},
#include "abi-list.h"
#undef SIZE
#undef FIELD
#undef VALUE
{
    NULL, 0
}
