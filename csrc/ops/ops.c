/* ops.c: the op tables (kind, name) generated from ops.def; the op
 * functions themselves are static inline in ops.h so the sweeps inline them.
 */
#include <math.h>
#include "tapead.h"
#include "ops.h"

const uint8_t ta_kinds[TA_NOPS] = {
#define TA_OP(NAME, KIND, SYM, ...) TA_K_##KIND,
#include "ops.def"
#undef TA_OP
};

const uint8_t ta_reads[TA_NOPS] = {
#define TA_OP(NAME, ...) RD_##NAME,
#include "ops.def"
#undef TA_OP
};

static const char *const ta_names[TA_NOPS] = {
#define TA_OP(NAME, KIND, SYM, ...) SYM,
#include "ops.def"
#undef TA_OP
};

static const char *const ta_idents[TA_NOPS] = {
#define TA_OP(NAME, KIND, SYM, ...) #NAME,
#include "ops.def"
#undef TA_OP
};

int ta_nops(void) { return TA_NOPS; }
const char *ta_op_name(int op) { return (op >= 0 && op < TA_NOPS) ? ta_names[op] : "?"; }
int ta_op_kind(int op) { return (op >= 0 && op < TA_NOPS) ? ta_kinds[op] : -1; }

const char *ta_op_ident(int op) { return (op >= 0 && op < TA_NOPS) ? ta_idents[op] : "?"; }
