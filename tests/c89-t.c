/* caibridge.h in strict ISO C90 (-std=c89 -pedantic-errors when the
 * compiler knows them): no variadic macro or other C99 form in the
 * header, so a C89 program can include it.  tap/basic.h is C99 (long
 * long), so the TAP is printed here. */
#include <stdio.h>

#include "caibridge.h"

int main(void)
{
    DLDataType type;
    int rc = cai_typestr_parse("<f8", 3, &type, NULL);

    printf("1..1\n");
    printf("%s 1 - C89: the header compiles and '<f8' parses\n",
           rc == 0 && type.bits == 64 ? "ok" : "not ok");
    return 0;
}
