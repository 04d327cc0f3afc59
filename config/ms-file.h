/*
 * ms-file.h: reading a small file whole (config.json, tokenizer.json, the
 * shard index, quantize_config.json).
 */
#ifndef MS_FILE_H
#define MS_FILE_H

#include <stddef.h>

#include "ms-error.h"

/* The file at path into a NUL-terminated malloc'd buffer (*len, when len is
 * not NULL, excludes the NUL). An error names the path. */
int ms_read_file(const char *path, char **out, size_t *len, struct ms_err *err);

#endif
