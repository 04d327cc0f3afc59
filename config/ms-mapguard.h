/*
 * ms-mapguard.h: file mappings that survive their file shrinking.
 *
 * A read of a page of a shared file mapping past the file's end raises
 * SIGBUS, which kills the process: a checkpoint truncated (or rewritten in
 * place) while it is mapped would take the daemon down from inside a kernel
 * or a loader thread. While any mapping is registered here, a SIGBUS
 * handler is installed: a fault inside a registered mapping replaces the
 * rest of that mapping, from the faulting page on, with anonymous zero
 * pages (so the faulting read resumes and reads zeros, whatever thread it
 * is on, with no unwinding), and records the fault. The readers check
 * afterwards (ms_mapguard_faults: one atomic load) and throw away what they
 * computed: the loader fails naming the file and the tensor, the engine
 * fails the step and refuses new requests. A SIGBUS anywhere else goes to
 * the handler that was there before (by default: the process dies, as
 * without the guard).
 *
 * This is not a copy: a file rewritten in place (`cp` over it, not `mv`)
 * without ever being shorter than what was mapped is read as it now is,
 * undetected. Replace checkpoints by rename.
 */
#ifndef MS_MAPGUARD_H
#define MS_MAPGUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "ms-error.h"

/* At most this many mappings are guarded at once (shards of all models). */
#define MS_MAPGUARD_MAX 1024

/* Guard [base, base + len) (a whole mapping, page-aligned base); name (the
 * file's path, for messages) must outlive the registration. Returns a slot
 * >= 0, or a negative error (-ENOSPC: MS_MAPGUARD_MAX reached; -errno:
 * the handler could not be installed). */
int ms_mapguard_add(const void *base, size_t len, const char *name, struct ms_err *err);

/* Stop guarding slot (before the mapping goes); slot < 0 is ignored. The
 * handler is removed with the last slot, the previous one restored. */
void ms_mapguard_remove(int slot);

/* Faults taken in guarded mappings since the process started. */
unsigned long ms_mapguard_faults(void);

/* Did slot fault? *offset: the first faulting byte, from the mapping's
 * start. */
bool ms_mapguard_faulted(int slot, size_t *offset);

/* "FILE: N bytes at offset O could not be read (truncated while mapped?)"
 * for the first faulted mapping still registered; false when none. */
bool ms_mapguard_describe(char *buf, size_t len);

#endif
