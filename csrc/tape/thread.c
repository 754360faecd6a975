/* thread.c: the thread's tape.  Each thread records on a tape of its own,
 * found through thread-local storage and created on first use (ta_self).
 * The thread holds one reference to it, dropped by a POSIX thread-exit
 * destructor; the tape itself lives on while any hold on it remains
 * (tape.c: lifetime). */
#include "tapead.h"
#if !defined(TA_TLS)
#  error "tapead needs thread-local storage for this compiler"
#endif
#if !defined(_MSC_VER)
#  include <pthread.h>
#endif

static TA_TLS ta_tape *ta_tls = NULL;

/* The thread's reference: a POSIX thread-exit destructor drops it.  (On
 * Windows there is no such destructor for the threads Python starts: an
 * exited thread's tape is kept.) */
#if !defined(_WIN32)
static pthread_key_t ta_exit_key;
static pthread_once_t ta_exit_once = PTHREAD_ONCE_INIT;
static int ta_exit_ok = 0;
static void ta_thread_exit(void *tape)
{
    if (ta_tls == tape) ta_tls = NULL;
    TA_ATOMIC_ADD32(&((ta_tape *)tape)->exited, 1u);
    ta_tape_unref((ta_tape *)tape);
}
static void ta_exit_key_make(void) { ta_exit_ok = pthread_key_create(&ta_exit_key, ta_thread_exit) == 0; }
static void ta_exit_watch(ta_tape *T)
{
    pthread_once(&ta_exit_once, ta_exit_key_make);
    if (ta_exit_ok) pthread_setspecific(ta_exit_key, T);
}
#else
static void ta_exit_watch(ta_tape *T) { (void)T; }
#endif

ta_tape *ta_self(void)
{
    if (!ta_tls && (ta_tls = ta_tape_new(NULL)) != NULL) ta_exit_watch(ta_tls);
    return ta_tls;
}

ta_tape *ta_self_if_any(void) { return ta_tls; }

int64_t ta_tape_tag(void)
{
    ta_tape *T = ta_self();
    return T ? (int64_t)T->tag : TA_ENOMEM;
}
