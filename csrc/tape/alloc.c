/* alloc.c: every allocation in tapead's C code goes through here, so that a
 * test can make one of them fail and check what the house rules promise:
 * the call reports TA_ENOMEM (MemoryError in Python), nothing crashes, and
 * the tape and every existing Value are exactly as they were.
 *
 * ta_fail_alloc(n) arms the n-th allocation from now (0 = the next one) to
 * fail, once; ta_fail_alloc(-1) disarms.  It returns whether a failure was
 * still armed, so a test can sweep n = 0, 1, 2, ... over an operation until
 * the operation no longer reaches the failing allocation.  The counter is
 * process-wide and meant for tests in one thread; armed never, it costs a
 * predictable branch per allocation (allocations are per segment, per plan
 * or per call, never per node). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200112L   /* posix_memalign under -std=c99 */
#endif
#include <stdlib.h>
#include "tapead.h"

static int64_t ta_fail_left = -1;   /* allocations to let through before one fails */

static int ta_should_fail(void)
{
    if (ta_fail_left < 0) return 0;
    if (ta_fail_left-- == 0) return 1;
    return 0;
}

void *ta_malloc(size_t n)            { return ta_should_fail() ? NULL : malloc(n); }
void *ta_calloc(size_t k, size_t n)  { return ta_should_fail() ? NULL : calloc(k, n); }
void *ta_realloc(void *p, size_t n)  { return ta_should_fail() ? NULL : realloc(p, n); }

#if defined(_WIN32)          /* Windows has no posix_memalign (MSVC and mingw-w64 alike) */
#  include <malloc.h>
ta_seg *ta_seg_alloc(void)
{ return ta_should_fail() ? NULL : (ta_seg *)_aligned_malloc(sizeof(ta_seg), TA_SEG_ALIGN); }
void ta_seg_free(ta_seg *s) { _aligned_free(s); }
#else
ta_seg *ta_seg_alloc(void)
{
    void *p = NULL;
    if (ta_should_fail() || posix_memalign(&p, TA_SEG_ALIGN, sizeof(ta_seg)) != 0) return NULL;
    return (ta_seg *)p;
}
void ta_seg_free(ta_seg *s) { free(s); }
#endif

int ta_fail_alloc(int64_t n)
{
    int armed = ta_fail_left >= 0;
    ta_fail_left = n < 0 ? -1 : n;
    return armed;
}
