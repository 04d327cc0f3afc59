/* ms-file.c: see ms-file.h. */
#include "ms-file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ms_read_file(const char *path, char **out, size_t *len, struct ms_err *err)
{
	*out = NULL;
	FILE *f = fopen(path, "rb");
	if (!f)
		return ms_err_set(err, -errno, "%s: cannot open: %s", path, strerror(errno));
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		n += fread(buf + n, 1, cap - n - 1, f);
		if (ferror(f)) {
			free(buf);
			fclose(f);
			return ms_err_set(err, -EIO, "%s: read error", path);
		}
		if (feof(f))
			break;
		char *nb = realloc(buf, cap * 2);
		if (!nb) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = nb;
		cap *= 2;
	}
	fclose(f);
	if (!buf)
		return ms_err_set(err, -ENOMEM, "%s: out of memory", path);
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return 0;
}
