/*
 * safetensors.h: memory-mapped, validating reader of Hugging Face
 * safetensors checkpoints, single-file or sharded.
 *
 * File format: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data buffer the offsets are relative to. Every header is checked
 * before any tensor is handed out: a lying or truncated file is an error that
 * names the file and the tensor, never a crash or a silent garbage load.
 *
 * Sharded checkpoints: model.safetensors.index.json's weight_map is the
 * truth (which file holds which tensor); shard names are never guessed.
 */
#ifndef MS_SAFETENSORS_H
#define MS_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

enum ms_dtype {
	MS_DTYPE_F32,
	MS_DTYPE_F16,
	MS_DTYPE_BF16,
	MS_DTYPE_U8,
	MS_DTYPE_I8,
	MS_DTYPE_I32,
	MS_DTYPE_F8_E4M3,
	MS_DTYPE_COUNT,
	MS_DTYPE_ANY = -1, /* for ms_checkpoint_get: accept any dtype */
};

size_t ms_dtype_size(enum ms_dtype dt);
const char *ms_dtype_name(enum ms_dtype dt);

#define MS_MAX_DIMS 6

struct ms_tensor {
	char *name;
	enum ms_dtype dtype;
	int ndim;
	int64_t shape[MS_MAX_DIMS];
	const void *data;  /* inside the read-only mapping; NULL when nbytes == 0 */
	size_t nbytes;     /* product(shape) * dtype size, checked */
	int file;          /* index into ms_checkpoint.files */
};

struct ms_st_file {
	char *path;
	void *map;          /* whole file, PROT_READ */
	size_t size;
	size_t data_start;  /* 8 + header length */
	int guard;          /* its ms_mapguard slot, or -1 */
};

struct ms_checkpoint {
	char *dir;
	struct ms_st_file *files;
	int n_files;
	struct ms_tensor *tensors;  /* sorted by name */
	size_t n_tensors;
};

/* Open DIR/model.safetensors if it exists, else the shards that
 * DIR/model.safetensors.index.json lists (transformers' order). On failure
 * ck is empty (safe to close). */
int ms_checkpoint_open(struct ms_checkpoint *ck, const char *dir, struct ms_err *err);

/* Open exactly one safetensors file (tests, tools). */
int ms_checkpoint_open_file(struct ms_checkpoint *ck, const char *path, struct ms_err *err);

/* NULL when absent. */
const struct ms_tensor *ms_checkpoint_find(const struct ms_checkpoint *ck, const char *name);

/* Does any tensor name start with prefix? */
bool ms_checkpoint_has_prefix(const struct ms_checkpoint *ck, const char *prefix);

/* Look up a tensor the model needs and check it: missing, wrong dtype
 * (unless dtype is MS_DTYPE_ANY) or a shape other than shape[0..ndim) is an
 * error naming the file and the tensor. */
int ms_checkpoint_get(const struct ms_checkpoint *ck, const char *name, enum ms_dtype dtype,
		      int ndim, const int64_t *shape, const struct ms_tensor **out,
		      struct ms_err *err);

/* Copy a small float tensor (bias, norm, sinks) as fp32, whatever its
 * float dtype: *out is malloc'd, owned by the caller. */
int ms_checkpoint_get_f32(const struct ms_checkpoint *ck, const char *name, int ndim,
			  const int64_t *shape, float **out, struct ms_err *err);

/* Path of the file holding t (for messages). */
const char *ms_checkpoint_file_of(const struct ms_checkpoint *ck, const struct ms_tensor *t);

/* Tell the kernel the pages of t are no longer needed (after a scheme has
 * converted them into its own layout), so peak memory stays near the final
 * size. The tensor must not be read afterwards. */
void ms_checkpoint_release(const struct ms_checkpoint *ck, const struct ms_tensor *t);

/* Were all the bytes read from the mappings so far really the files'? A
 * file that shrank while mapped reads as zeros past its new end (see
 * config/ms-mapguard.h) and is an -EIO here, naming the file and the
 * tensor that lost its data. Readers check after reading, before trusting
 * what they computed. */
int ms_checkpoint_check(const struct ms_checkpoint *ck, struct ms_err *err);

/* Unmap everything; NULL and already-closed are fine. */
void ms_checkpoint_close(struct ms_checkpoint *ck);

/* Format a shape as "[a, b, c]" into buf. */
const char *ms_shape_str(char *buf, size_t len, int ndim, const int64_t *shape);

#endif
