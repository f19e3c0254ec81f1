/* hostile.c: the example plugin of docs/examples made hostile, to test that the kit isolates
 * plugins ([CASE-ISOLATE], [CASE-TIMEOUT]). QSTEST_HOSTILE says what it does in its first
 * cast or quantize call of the run: `exit` (exit(0), as a plugin that tears the process down
 * would), `segv` (raises SIGSEGV), `hang` (sleeps for good), `slow` (sleeps 700 ms, then
 * does its work: a slot whose time the kit must see, [CASE-TIMING]) or `poison` (returns an
 * error, and so does every later cast or quantize call of that process, as a GPU context
 * after an illegal memory access would); QSTEST_HOSTILE_MARK names a
 * file it creates then, so that it misbehaves once: the cases after it run normally in a
 * fresh worker. QSTEST_HOSTILE_OPEN=segv makes it crash in open instead.
 * QSTEST_HOSTILE_NAME gives the table that name (a plugin that calls itself "ref"), and
 * QSTEST_HOSTILE_NODEVICE=1 makes its device slot return NULL. */
#define qs_backend_entry_v1 example_entry_v1
#include "example_backend.c"
#undef qs_backend_entry_v1

#include <fcntl.h>
#include <signal.h>

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

static int poisoned; /* `poison` happened in this process */

/* Misbehaves as QSTEST_HOSTILE says, the first time only (the mark file is made atomically,
 * so of several ranks only one misbehaves). Returns nonzero when the slot is to fail. */
static int misbehave(void)
{
    const char *what = getenv("QSTEST_HOSTILE"), *mark = getenv("QSTEST_HOSTILE_MARK");
    if (poisoned)
        return 1;
    if (!what || !mark)
        return 0;
    int fd = open(mark, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return 0;
    close(fd);
    if (strcmp(what, "exit") == 0)
        exit(0);
    if (strcmp(what, "segv") == 0)
        raise(SIGSEGV);
    if (strcmp(what, "hang") == 0)
        for (;;)
            ex_sleep_ms(1000);
    if (strcmp(what, "slow") == 0)
        ex_sleep_ms(700);
    poisoned = strcmp(what, "poison") == 0;
    return poisoned;
}

static qs_status hostile_cast(void *state, const qs_cast_args *args)
{
    if (misbehave())
        return QS_ERR_INTERNAL;
    return example_cast(state, args);
}

static qs_status hostile_quantize(void *state, const qs_quantize_args *args)
{
    if (misbehave())
        return QS_ERR_INTERNAL;
    return example_quantize(state, args);
}

static qs_status hostile_open(void **state, char *why, size_t why_len)
{
    const char *o = getenv("QSTEST_HOSTILE_OPEN");
    if (o && strcmp(o, "segv") == 0)
        raise(SIGSEGV);
    return example_open(state, why, why_len);
}

static const char *hostile_device(void *state)
{
    (void)state;
    return NULL;
}

static qs_backend hostile_table;

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    const qs_backend *t = example_entry_v1(abi_version);
    if (!t)
        return NULL;
    hostile_table = *t;
    hostile_table.name = "hostile";
    hostile_table.open = hostile_open;
    hostile_table.cast = hostile_cast;
    hostile_table.quantize = hostile_quantize;
    const char *name = getenv("QSTEST_HOSTILE_NAME"), *nodev = getenv("QSTEST_HOSTILE_NODEVICE");
    if (name)
        hostile_table.name = name;
    if (nodev && strcmp(nodev, "1") == 0)
        hostile_table.device = hostile_device;
    return &hostile_table;
}
