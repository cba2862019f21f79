/* Private: descriptor checks shared by the conversions. */
#ifndef CAIBRIDGE_DESC_H
#define CAIBRIDGE_DESC_H

#include "caibridge.h"

/* Checks desc and writes its strides in elements to elem_strides (ndim
 * entries; C-contiguous ones when desc has none). */
int cai_desc_check(const cai_desc_t *desc, int64_t *elem_strides,
                   cai_error_t *err);

#endif
