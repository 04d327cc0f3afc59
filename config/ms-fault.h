/*
 * ms-fault.h: allocation fault injection for test builds (in the manner of
 * sqlite's DO_OS_MALLOC_TEST).
 *
 * ms-fault.c is never part of the daemon: a test executable links it with
 * the linker's --wrap for every allocator the project's code calls
 * (config/meson.build: ms_fault_link_args). Every call the project's
 * objects make to malloc, calloc, realloc, free, strdup, strndup,
 * posix_memalign, aligned_alloc, asprintf, vasprintf, realpath, mmap and
 * munmap then goes through the wrappers; libraries' own allocations (libc
 * inside itself, libmicrohttpd, PCRE2, oneDNN) do not, except cJSON's,
 * whose hook (ms-json.c's ms_json_init) calls our malloc.
 *
 * One process-wide counter: allocations are counted in the order they
 * happen, on every thread, so that a failure on the engine's thread or an
 * HTTP connection's is reached as well as one on the caller's. Where
 * threads interleave, the Nth allocation of a run may differ between runs;
 * the sweep's checks hold whichever allocation fails. A thread may exempt
 * itself (the test's own HTTP client).
 */
#ifndef MS_FAULT_H
#define MS_FAULT_H

#include <stdbool.h>
#include <stdint.h>

/* Fail the nth allocation counted from now (1 = the next one); 0 disarms.
 * Resets the count. */
void ms_fault_arm(uint64_t n);
/* Allocations counted since the last arm (failed ones included). */
uint64_t ms_fault_count(void);
/* Whether the armed allocation has failed, and where it was called from
 * (a return address, for addr2line; NULL if none failed). */
bool ms_fault_fired(void);
void *ms_fault_site(void);
/* Blocks made through the wrappers and not yet freed (malloc'd and mapped). */
int64_t ms_fault_live(void);
/* This thread's allocations neither count nor fail (still tracked live). */
void ms_fault_exempt_thread(bool exempt);

#endif
