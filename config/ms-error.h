/*
 * ms-error.h: how every moeserve function reports failure.
 *
 * A function that can fail returns an int: 0 on success, a negative errno
 * value on failure (-EINVAL bad configuration, -EBADMSG malformed file,
 * -ENOENT missing file or tensor, -ENOTSUP unsupported combination, -ENOMEM,
 * -EIO). It also fills a caller-owned struct ms_err with a message that names
 * the field, file or tensor at fault. Library code never prints and never
 * exits: only the command-line front end (server/) decides what to show and
 * which exit status to use.
 */
#ifndef MS_ERROR_H
#define MS_ERROR_H

#include <errno.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* the ROCm backend's kernel sources are C++ to hipcc and nvcc */
#endif

#define MS_ERR_MSG_MAX 1024

struct ms_err {
	int code;                  /* negative errno, 0 when no error was set */
	char msg[MS_ERR_MSG_MAX];  /* human-readable, no trailing newline */
};

/* Record an error (printf-style message) and return code, so that callers can
 * write `return ms_err_set(err, -EINVAL, "...")`. err may be NULL. */
int ms_err_set(struct ms_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepend context ("loading layer 3: ") to an existing message; returns
 * err->code. Used where a deep error needs the caller's view added. */
int ms_err_prefix(struct ms_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void ms_err_clear(struct ms_err *err);

#ifdef __cplusplus
}
#endif

#endif
