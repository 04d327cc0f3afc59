/* ms-error.c: error recording (see ms-error.h for the convention). */
#include "ms-error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ms_err_set(struct ms_err *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
		err->code = code;
	}
	return code;
}

int ms_err_prefix(struct ms_err *err, const char *fmt, ...)
{
	if (!err)
		return -EINVAL;
	char head[MS_ERR_MSG_MAX], old[MS_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* head then the old message, cut at the buffer's end if need be */
	size_t hl = strlen(head), ol = strlen(old), cap = sizeof(err->msg) - 1;
	if (hl > cap)
		hl = cap;
	if (ol > cap - hl)
		ol = cap - hl;
	memcpy(err->msg, head, hl);
	memcpy(err->msg + hl, old, ol);
	err->msg[hl + ol] = '\0';
	return err->code;
}

void ms_err_clear(struct ms_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}
