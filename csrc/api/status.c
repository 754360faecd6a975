/* The status table (status.def) for Python: tapead/_c/status.py reads it once
 * at import, to map each status to its exception and message. */
#include "tapead.h"

typedef struct { int st; const char *name, *exc, *msg; } ta_status_t;

static const ta_status_t ta_statuses[] = {
#define TA_ST(NAME, VALUE, EXC, MSG) { VALUE, #NAME, #EXC, MSG },
#include "status.def"
#undef TA_ST
};

int ta_status_row(int k, int *st, const char **name, const char **exc, const char **msg)
{
    if (k < 0 || (size_t)k >= sizeof ta_statuses / sizeof *ta_statuses || !st || !name || !exc || !msg)
        return TA_EARG;
    *st = ta_statuses[k].st;
    *name = ta_statuses[k].name;
    *exc = ta_statuses[k].exc;
    *msg = ta_statuses[k].msg;
    return TA_OK;
}
