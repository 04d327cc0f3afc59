/*
 * test-safetensors.c: the safetensors reader (quant/safetensors.c) against
 * files crafted byte by byte: every malformed file must be a clear error
 * (negative errno, a message naming the file and, where there is one, the
 * tensor), never a crash or a silent load; valid files must read back exactly.
 *
 * Every test works in its own folder under one mkdtemp() root that main()
 * removes at the end, whatever the tests did.
 */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "safetensors.h"

static char g_root[256];

#define ASSERT_MSG_HAS(err, s)                                                              \
	ck_assert_msg(strstr((err).msg, (s)) != NULL, "message \"%s\" lacks \"%s\"", (err).msg, \
		      (s))

/* ---- helpers: files built from a header string plus data bytes ---- */

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	ck_assert_int_ge(n, 0);
	return s;
}

/* A fresh empty folder for one test (removed with g_root by main). */
static char *new_dir(void)
{
	char *d = xasprintf("%s/t.XXXXXX", g_root);
	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

static void write_raw(const char *path, const void *buf, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

static void put_u64le(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* dir/name := u64le(hlen) header data, where hlen is the header's length
 * unless hlen_override is nonzero. Returns the path (malloc'd). */
static char *st_write_len(const char *dir, const char *name, uint64_t hlen_override,
			  const char *header, const void *data, size_t n)
{
	char *path = xasprintf("%s/%s", dir, name);
	size_t hl = strlen(header);
	uint8_t *buf = malloc(8 + hl + n + 1);
	ck_assert_ptr_nonnull(buf);
	put_u64le(buf, hlen_override ? hlen_override : hl);
	memcpy(buf + 8, header, hl);
	if (n)
		memcpy(buf + 8 + hl, data, n);
	write_raw(path, buf, 8 + hl + n);
	free(buf);
	return path;
}

static char *st_write(const char *dir, const char *name, const char *header, const void *data,
		      size_t n)
{
	return st_write_len(dir, name, 0, header, data, n);
}

static char *text_write(const char *dir, const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", dir, name);
	write_raw(path, text, strlen(text));
	return path;
}

/* Open path as one file, expecting failure: checks the code is negative
 * (and equal to want when want != 0), that the checkpoint is left empty and
 * that the message names the file and, when given, the tensor. */
static void expect_open_file_error(const char *path, int want, const char *tensor,
				   struct ms_err *err)
{
	struct ms_checkpoint ck;
	memset(err, 0, sizeof(*err));
	int rc = ms_checkpoint_open_file(&ck, path, err);
	ck_assert_msg(rc < 0, "%s: expected an error, got %d", path, rc);
	if (want)
		ck_assert_msg(rc == want, "%s: expected %d, got %d (%s)", path, want, rc, err->msg);
	ck_assert_int_eq(err->code, rc);
	ck_assert_ptr_null(ck.tensors);
	ck_assert_ptr_null(ck.files);
	ck_assert_uint_eq(ck.n_tensors, 0);
	ASSERT_MSG_HAS(*err, path);
	if (tensor) {
		char *q = xasprintf("\"%s\"", tensor);
		ASSERT_MSG_HAS(*err, q);
		free(q);
	}
	ms_checkpoint_close(&ck); /* must be harmless after a failure */
}

/* A one-tensor header: {"name": {"dtype":..., "shape":..., "data_offsets":...}} */
static char *one_tensor(const char *name, const char *dtype, const char *shape,
			const char *offsets)
{
	return xasprintf("{\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":%s}}", name, dtype,
			 shape, offsets);
}

static void one_tensor_error(const char *dtype, const char *shape, const char *offsets,
			     const void *data, size_t n, int want, struct ms_err *err)
{
	char *d = new_dir();
	char *h = one_tensor("layer.w", dtype, shape, offsets);
	char *p = st_write(d, "model.safetensors", h, data, n);
	expect_open_file_error(p, want, "layer.w", err);
	free(p);
	free(h);
	free(d);
}

static const uint8_t zeros[64];

/* ---- malformed files ---- */

START_TEST(test_shorter_than_8_bytes)
{
	static const uint8_t b[8] = {2, 0, 0, 0, 0, 0, 0};
	char *d = new_dir();
	for (size_t n = 0; n < 8; n++) {
		char *p = xasprintf("%s/short%zu.safetensors", d, n);
		write_raw(p, b, n);
		struct ms_err err;
		expect_open_file_error(p, -EBADMSG, NULL, &err);
		ASSERT_MSG_HAS(err, "truncated");
		free(p);
	}
	free(d);
}
END_TEST

START_TEST(test_missing_file)
{
	char *d = new_dir();
	char *p = xasprintf("%s/absent.safetensors", d);
	struct ms_err err;
	expect_open_file_error(p, -ENOENT, NULL, &err);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_header_length_past_end)
{
	char *d = new_dir();
	/* claims 100 header bytes, has 2 */
	char *p = st_write_len(d, "a.safetensors", 100, "{}", NULL, 0);
	struct ms_err err;
	expect_open_file_error(p, -EBADMSG, NULL, &err);
	ASSERT_MSG_HAS(err, "100");
	free(p);
	/* exactly one byte too many */
	p = st_write_len(d, "b.safetensors", 3, "{}", NULL, 0);
	expect_open_file_error(p, -EBADMSG, NULL, &err);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_header_length_huge)
{
	static const uint64_t lens[] = {UINT64_C(1) << 63, UINT64_MAX, UINT64_MAX - 7,
					(UINT64_C(1) << 32) + 2};
	char *d = new_dir();
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		char *name = xasprintf("huge%zu.safetensors", i);
		char *p = st_write_len(d, name, lens[i], "{}", zeros, 16);
		struct ms_err err;
		expect_open_file_error(p, -EBADMSG, NULL, &err);
		free(p);
		free(name);
	}
	free(d);
}
END_TEST

START_TEST(test_header_invalid_json)
{
	static const char *const bad[] = {
		"{\"a\": ",
		"not json",
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
		"{\"a\" 1}",
		"",
	};
	char *d = new_dir();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *name = xasprintf("bad%zu.safetensors", i);
		char *p = st_write(d, name, bad[i], zeros, 4);
		struct ms_err err;
		expect_open_file_error(p, -EBADMSG, NULL, &err);
		ASSERT_MSG_HAS(err, "JSON");
		free(p);
		free(name);
	}
	free(d);
}
END_TEST

START_TEST(test_header_not_object)
{
	static const char *const bad[] = {"[1, 2]", "42", "\"str\"", "null", "true", "[]"};
	char *d = new_dir();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *name = xasprintf("notobj%zu.safetensors", i);
		char *p = st_write(d, name, bad[i], NULL, 0);
		struct ms_err err;
		expect_open_file_error(p, -EBADMSG, NULL, &err);
		ASSERT_MSG_HAS(err, "object");
		free(p);
		free(name);
	}
	free(d);
}
END_TEST

START_TEST(test_entry_structure)
{
	/* entries that are not {dtype, shape, 2-element data_offsets} */
	static const char *const bad[] = {
		"{\"layer.w\": 5}",
		"{\"layer.w\": [1, 2]}",
		"{\"layer.w\": {\"shape\":[1],\"data_offsets\":[0,4]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
		"{\"layer.w\": {\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}",
		"{\"layer.w\": {\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
	};
	char *d = new_dir();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *name = xasprintf("entry%zu.safetensors", i);
		char *p = st_write(d, name, bad[i], zeros, 8);
		struct ms_err err;
		expect_open_file_error(p, 0, "layer.w", &err);
		free(p);
		free(name);
	}
	free(d);
}
END_TEST

START_TEST(test_span_not_shape_times_dtype)
{
	struct ms_err err;
	/* F32 [2, 2] needs 16 bytes, the offsets give 12 */
	one_tensor_error("F32", "[2, 2]", "[0, 12]", zeros, 16, -EBADMSG, &err);
	ASSERT_MSG_HAS(err, "12");
	ASSERT_MSG_HAS(err, "16");
	ASSERT_MSG_HAS(err, "[2, 2]");
	/* ... or 20 */
	one_tensor_error("F32", "[2, 2]", "[0, 20]", zeros, 20, -EBADMSG, &err);
	/* BF16 [3] needs 6, not 3 (element count instead of bytes) */
	one_tensor_error("BF16", "[3]", "[0, 3]", zeros, 8, -EBADMSG, &err);
	/* a scalar needs one element */
	one_tensor_error("I32", "[]", "[0, 0]", zeros, 8, -EBADMSG, &err);
	/* an empty tensor needs nothing */
	one_tensor_error("U8", "[4, 0]", "[0, 4]", zeros, 8, -EBADMSG, &err);
}
END_TEST

START_TEST(test_truncated_data)
{
	char *d = new_dir();
	char *h = one_tensor("layer.w", "F32", "[4]", "[0, 16]");
	float v[4] = {1, 2, 3, 4};
	char *p = st_write(d, "model.safetensors", h, v, sizeof(v));
	/* the intact file opens */
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	ms_checkpoint_close(&ck);
	/* cut the last 5 bytes */
	ck_assert_int_eq(truncate(p, (off_t)(8 + strlen(h) + 11)), 0);
	expect_open_file_error(p, -EBADMSG, "layer.w", &err);
	ASSERT_MSG_HAS(err, "11");
	/* cut the whole data section */
	ck_assert_int_eq(truncate(p, (off_t)(8 + strlen(h))), 0);
	expect_open_file_error(p, -EBADMSG, "layer.w", &err);
	free(p);
	free(h);
	free(d);
}
END_TEST

/* Only the space padding the format allows may follow the header's JSON. */
START_TEST(test_header_trailing_garbage)
{
	char *d = new_dir();
	struct ms_err err;
	char *p = st_write(d, "g.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
			   "\"data_offsets\":[0,2]}} garbage", zeros, 2);
	expect_open_file_error(p, -EBADMSG, NULL, &err);
	ASSERT_MSG_HAS(err, "JSON");
	free(p);
	p = st_write(d, "s.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
		     "\"data_offsets\":[0,2]}}      ", zeros, 2);
	struct ms_checkpoint ck;
	ck_assert_int_eq(ms_checkpoint_open_file(&ck, p, &err), 0);
	ms_checkpoint_close(&ck);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_begin_after_end)
{
	struct ms_err err;
	one_tensor_error("F32", "[1]", "[8, 4]", zeros, 16, -EBADMSG, &err);
	ASSERT_MSG_HAS(err, "begin 8 > end 4");
	one_tensor_error("U8", "[0]", "[5, 4]", zeros, 16, -EBADMSG, &err);
	/* begin > end where end - begin, wrapped mod 2^64, equals the size the
	 * shape needs: 2^64 - 2^53 = 2^53 * 2047. Only the begin <= end check
	 * stops this one (it would point 2^53 bytes past the mapping). */
	one_tensor_error("U8", "[9007199254740992, 2047]", "[9007199254740992, 0]", zeros, 16,
			 -EBADMSG, &err);
}
END_TEST

START_TEST(test_offsets_past_data_even_if_empty)
{
	struct ms_err err;
	/* an empty tensor still may not point outside the data section */
	one_tensor_error("F32", "[0]", "[100, 100]", zeros, 16, -EBADMSG, &err);
}
END_TEST

START_TEST(test_overlapping_offsets)
{
	static const char *const hdrs[] = {
		/* partial overlap */
		"{\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"b.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
		/* the same span twice */
		"{\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"b.w\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
		/* one nested inside the other, listed in reverse order */
		"{\"b.w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
		"\"a.w\":{\"dtype\":\"U8\",\"shape\":[12],\"data_offsets\":[0,12]}}",
	};
	char *d = new_dir();
	for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++) {
		char *name = xasprintf("overlap%zu.safetensors", i);
		char *p = st_write(d, name, hdrs[i], zeros, 12);
		struct ms_err err;
		expect_open_file_error(p, -EBADMSG, NULL, &err);
		ASSERT_MSG_HAS(err, "\"a.w\"");
		ASSERT_MSG_HAS(err, "\"b.w\"");
		ASSERT_MSG_HAS(err, "overlap");
		free(p);
		free(name);
	}
	free(d);
}
END_TEST

START_TEST(test_duplicate_tensor_name)
{
	char *d = new_dir();
	const char *h = "{\"dup.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			"\"other\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]},"
			"\"dup.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
	char *p = st_write(d, "model.safetensors", h, zeros, 9);
	struct ms_err err;
	expect_open_file_error(p, -EBADMSG, "dup.w", &err);
	ASSERT_MSG_HAS(err, "duplicate");
	free(p);
	free(d);
}
END_TEST

START_TEST(test_unknown_dtype)
{
	static const char *const dts[] = {"C64", "F64", "f32", "BOOL", "", "F8_E5M2", "I64"};
	for (size_t i = 0; i < sizeof(dts) / sizeof(dts[0]); i++) {
		struct ms_err err;
		one_tensor_error(dts[i], "[1]", "[0, 8]", zeros, 8, 0, &err);
		char *q = xasprintf("\"%s\"", dts[i]);
		ASSERT_MSG_HAS(err, q);
		ASSERT_MSG_HAS(err, "dtype");
		free(q);
	}
}
END_TEST

START_TEST(test_bad_shape_entry)
{
	static const char *const shapes[] = {
		"[-1]", "[2, -3]", "[1.5]", "[2, 0.25]", "[\"2\"]", "[true]", "[null]", "[[2]]",
		"[1e300]", "[9007199254740994]", "[-0.5]",
	};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct ms_err err;
		one_tensor_error("U8", shapes[i], "[0, 2]", zeros, 8, -EBADMSG, &err);
		ASSERT_MSG_HAS(err, "shape");
	}
}
END_TEST

START_TEST(test_shape_overflow)
{
	struct ms_err err;
	/* the element count itself overflows 64 bits */
	one_tensor_error("U8", "[4294967296, 4294967296, 2]", "[0, 8]", zeros, 8, -EBADMSG, &err);
	ASSERT_MSG_HAS(err, "overflow");
	one_tensor_error("U8", "[9007199254740992, 9007199254740992]", "[0, 8]", zeros, 8,
			 -EBADMSG, &err);
	ASSERT_MSG_HAS(err, "overflow");
	/* 2^63 elements fit, 2^63 * 4 bytes do not: the byte count must not
	 * wrap around to the span (2^65 mod 2^64 = 0 = an empty span). */
	one_tensor_error("F32", "[2147483648, 2147483648, 2]", "[0, 0]", zeros, 8, -EBADMSG, &err);
	ASSERT_MSG_HAS(err, "overflows");
	one_tensor_error("F32", "[4294967296, 1073741824]", "[0, 0]", zeros, 8, -EBADMSG, &err);
	ASSERT_MSG_HAS(err, "overflows");
}
END_TEST

/* ---- valid files ---- */

/* dtype, shape, begin, end of each tensor of the all-dtypes file. */
static const struct {
	const char *name;
	enum ms_dtype dt;
	int ndim;
	int64_t shape[3];
	size_t begin, end;
} all_t[] = {
	{"t_f32", MS_DTYPE_F32, 2, {2, 2}, 0, 16},
	{"t_f16", MS_DTYPE_F16, 1, {3}, 16, 22},
	{"t_bf16", MS_DTYPE_BF16, 1, {3}, 22, 28},
	{"t_u8", MS_DTYPE_U8, 1, {4}, 28, 32},
	{"t_i8", MS_DTYPE_I8, 2, {2, 2}, 32, 36},
	{"t_i32", MS_DTYPE_I32, 1, {2}, 36, 44},
	{"t_f8", MS_DTYPE_F8_E4M3, 2, {1, 3}, 44, 47},
	{"t_empty", MS_DTYPE_F32, 1, {0}, 47, 47},
	{"t_empty2", MS_DTYPE_BF16, 3, {2, 0, 5}, 47, 47},
	{"t_scalar", MS_DTYPE_F32, 0, {0}, 47, 51},
};
#define N_ALL (sizeof(all_t) / sizeof(all_t[0]))

static char *all_header(void)
{
	char *h = xasprintf("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"ignored\"}");
	for (size_t i = 0; i < N_ALL; i++) {
		char shape[64] = "[";
		for (int k = 0; k < all_t[i].ndim; k++)
			snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%lld",
				 k ? "," : "", (long long)all_t[i].shape[k]);
		strcat(shape, "]");
		char *n = xasprintf("%s,\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
				    h, all_t[i].name, ms_dtype_name(all_t[i].dt), shape,
				    all_t[i].begin, all_t[i].end);
		free(h);
		h = n;
	}
	char *n = xasprintf("%s}", h);
	free(h);
	return n;
}

START_TEST(test_every_dtype_reads_back)
{
	uint8_t data[51];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + 3);
	char *d = new_dir();
	char *h = all_header();
	char *p = st_write(d, "model.safetensors", h, data, sizeof(data));
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(ck.n_files, 1);
	ck_assert_uint_eq(ck.files[0].data_start, 8 + strlen(h));
	ck_assert_uint_eq(ck.n_tensors, N_ALL);
	for (size_t i = 1; i < ck.n_tensors; i++) /* sorted by name */
		ck_assert_int_lt(strcmp(ck.tensors[i - 1].name, ck.tensors[i].name), 0);
	const uint8_t *base = (const uint8_t *)ck.files[0].map + ck.files[0].data_start;
	for (size_t i = 0; i < N_ALL; i++) {
		const struct ms_tensor *t = ms_checkpoint_find(&ck, all_t[i].name);
		ck_assert_msg(t != NULL, "%s missing", all_t[i].name);
		ck_assert_str_eq(t->name, all_t[i].name);
		ck_assert_int_eq(t->dtype, all_t[i].dt);
		ck_assert_int_eq(t->ndim, all_t[i].ndim);
		for (int k = 0; k < t->ndim; k++)
			ck_assert_int_eq(t->shape[k], all_t[i].shape[k]);
		ck_assert_uint_eq(t->nbytes, all_t[i].end - all_t[i].begin);
		ck_assert_str_eq(ms_checkpoint_file_of(&ck, t), p);
		if (t->nbytes == 0) {
			ck_assert_ptr_null(t->data);
		} else {
			ck_assert_ptr_eq(t->data, base + all_t[i].begin);
			ck_assert_int_eq(memcmp(t->data, data + all_t[i].begin, t->nbytes), 0);
		}
		/* the typed lookup agrees */
		const struct ms_tensor *g = NULL;
		ck_assert_msg(ms_checkpoint_get(&ck, all_t[i].name, all_t[i].dt, all_t[i].ndim,
						all_t[i].shape, &g, &err) == 0,
			      "%s", err.msg);
		ck_assert_ptr_eq(g, t);
		ck_assert_int_eq(ms_checkpoint_get(&ck, all_t[i].name, MS_DTYPE_ANY, all_t[i].ndim,
						   all_t[i].shape, &g, &err),
				 0);
	}
	ck_assert_ptr_null(ms_checkpoint_find(&ck, "__metadata__"));
	ck_assert_ptr_null(ms_checkpoint_find(&ck, "t_"));
	ck_assert_ptr_null(ms_checkpoint_find(&ck, "t_f32x"));
	/* the empty and the scalar read as fp32 too */
	float *f = NULL;
	ck_assert_int_eq(ms_checkpoint_get_f32(&ck, "t_empty", 1, (int64_t[]){0}, &f, &err), 0);
	ck_assert_ptr_nonnull(f);
	free(f);
	ck_assert_int_eq(ms_checkpoint_get_f32(&ck, "t_scalar", 0, NULL, &f, &err), 0);
	float want;
	memcpy(&want, data + 47, 4);
	ck_assert_int_eq(memcmp(f, &want, 4), 0);
	free(f);
	ms_checkpoint_close(&ck);
	ck_assert_ptr_null(ck.tensors);
	ms_checkpoint_close(&ck); /* twice is fine */
	ms_checkpoint_close(NULL);
	free(p);
	free(h);
	free(d);
}
END_TEST

START_TEST(test_dtype_table)
{
	static const struct {
		enum ms_dtype dt;
		const char *name;
		size_t size;
	} want[] = {
		{MS_DTYPE_F32, "F32", 4}, {MS_DTYPE_F16, "F16", 2},  {MS_DTYPE_BF16, "BF16", 2},
		{MS_DTYPE_U8, "U8", 1},   {MS_DTYPE_I8, "I8", 1},    {MS_DTYPE_I32, "I32", 4},
		{MS_DTYPE_F8_E4M3, "F8_E4M3", 1},
	};
	ck_assert_int_eq(sizeof(want) / sizeof(want[0]), MS_DTYPE_COUNT);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		ck_assert_str_eq(ms_dtype_name(want[i].dt), want[i].name);
		ck_assert_uint_eq(ms_dtype_size(want[i].dt), want[i].size);
	}
	ck_assert_uint_eq(ms_dtype_size(MS_DTYPE_ANY), 0);
	ck_assert_uint_eq(ms_dtype_size(MS_DTYPE_COUNT), 0);
	ck_assert_str_eq(ms_dtype_name(MS_DTYPE_COUNT), "?");
	char buf[64];
	ck_assert_str_eq(ms_shape_str(buf, sizeof(buf), 3, (int64_t[]){2, 0, 5}), "[2, 0, 5]");
	ck_assert_str_eq(ms_shape_str(buf, sizeof(buf), 0, NULL), "[]");
	/* a buffer too small is cut, never overrun */
	char small[6];
	ms_shape_str(small, sizeof(small), 3, (int64_t[]){123456, 7, 8});
	ck_assert_uint_lt(strlen(small), sizeof(small));
}
END_TEST

START_TEST(test_empty_header_and_padding)
{
	char *d = new_dir();
	/* no tensors at all */
	char *p = st_write(d, "empty.safetensors", "{}", NULL, 0);
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(ck.n_tensors, 0);
	ck_assert_ptr_null(ms_checkpoint_find(&ck, "x"));
	const struct ms_tensor *t = (const struct ms_tensor *)1;
	ck_assert_int_eq(ms_checkpoint_get(&ck, "x", MS_DTYPE_ANY, 0, NULL, &t, &err), -ENOENT);
	ck_assert_ptr_null(t);
	ASSERT_MSG_HAS(err, "\"x\"");
	ASSERT_MSG_HAS(err, p);
	ms_checkpoint_close(&ck);
	free(p);
	/* writers pad the header with spaces to 8-byte alignment */
	const float v = 2.5f;
	p = st_write(d, "padded.safetensors",
		     "{\"__metadata__\":{\"format\":\"pt\"},"
		     "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ",
		     &v, 4);
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(ck.n_tensors, 1);
	float *f = NULL;
	ck_assert_int_eq(ms_checkpoint_get_f32(&ck, "w", 1, (int64_t[]){1}, &f, &err), 0);
	ck_assert(f[0] == 2.5f);
	free(f);
	ms_checkpoint_close(&ck);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_empty_tensor_inside_another)
{
	/* an empty tensor occupies nothing, so sharing offsets with another
	 * tensor's span is not an overlap */
	char *d = new_dir();
	const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
			"\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
			"\"f\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
	char *p = st_write(d, "model.safetensors", h, zeros, 8);
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(ck.n_tensors, 3);
	ms_checkpoint_close(&ck);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_misaligned_offsets_read_as_f32)
{
	/* U8 byte at 0 pushes everything after it to odd offsets; the header is
	 * padded so the data section itself starts 8-aligned in the file. */
	const float fv[2] = {1.5f, -3.25f};
	const uint16_t bv[3] = {0x3FC0, 0xC050, 0x0001};      /* 1.5, -3.25, 2^-133 */
	const uint16_t hv[3] = {0x3E00, 0xC280, 0x0001};      /* 1.5, -3.25, 2^-24 */
	uint8_t data[21];
	data[0] = 0xAB;
	for (int i = 0; i < 2; i++)
		memcpy(data + 1 + 4 * i, &fv[i], 4); /* host order = little-endian on our targets */
	for (int i = 0; i < 3; i++) {
		data[9 + 2 * i] = (uint8_t)bv[i];
		data[10 + 2 * i] = (uint8_t)(bv[i] >> 8);
		data[15 + 2 * i] = (uint8_t)hv[i];
		data[16 + 2 * i] = (uint8_t)(hv[i] >> 8);
	}
	char h[512];
	snprintf(h, sizeof(h),
		 "{\"p\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		 "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]},"
		 "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[9,15]},"
		 "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[15,21]}}");
	while ((8 + strlen(h)) % 8)
		strcat(h, " ");
	char *d = new_dir();
	char *p = st_write(d, "model.safetensors", h, data, sizeof(data));
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	const struct ms_tensor *t = ms_checkpoint_find(&ck, "f");
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_ne((uintptr_t)t->data % 4, 0); /* really misaligned */
	float *f = NULL;
	ck_assert_msg(ms_checkpoint_get_f32(&ck, "f", 1, (int64_t[]){2}, &f, &err) == 0, "%s",
		      err.msg);
	ck_assert(f[0] == 1.5f && f[1] == -3.25f);
	free(f);
	ck_assert_msg(ms_checkpoint_get_f32(&ck, "b", 1, (int64_t[]){3}, &f, &err) == 0, "%s",
		      err.msg);
	ck_assert_msg(f[0] == 1.5f && f[1] == -3.25f && f[2] == ldexpf(1.0f, -133),
		      "bf16 read %a %a %a", (double)f[0], (double)f[1], (double)f[2]);
	free(f);
	ck_assert_msg(ms_checkpoint_get_f32(&ck, "h", 1, (int64_t[]){3}, &f, &err) == 0, "%s",
		      err.msg);
	ck_assert_msg(f[0] == 1.5f && f[1] == -3.25f && f[2] == ldexpf(1.0f, -24),
		      "f16 read %a %a %a", (double)f[0], (double)f[1], (double)f[2]);
	free(f);
	/* an integer tensor is not a float tensor */
	f = (float *)1;
	ck_assert_int_lt(ms_checkpoint_get_f32(&ck, "p", 1, (int64_t[]){1}, &f, &err), 0);
	ck_assert_ptr_null(f);
	ASSERT_MSG_HAS(err, "\"p\"");
	ASSERT_MSG_HAS(err, "U8");
	ms_checkpoint_close(&ck);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_get_errors)
{
	char *d = new_dir();
	const char *h = "{\"m.w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}";
	char *p = st_write(d, "model.safetensors", h, zeros, 12);
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open_file(&ck, p, &err) == 0, "%s", err.msg);
	const struct ms_tensor *t = (const struct ms_tensor *)1;

	/* missing */
	int rc = ms_checkpoint_get(&ck, "m.bias", MS_DTYPE_BF16, 1, (int64_t[]){2}, &t, &err);
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_int_eq(err.code, rc);
	ck_assert_ptr_null(t);
	ASSERT_MSG_HAS(err, "\"m.bias\"");
	ASSERT_MSG_HAS(err, "missing");

	/* wrong dtype: both named */
	rc = ms_checkpoint_get(&ck, "m.w", MS_DTYPE_F32, 2, (int64_t[]){2, 3}, &t, &err);
	ck_assert_int_lt(rc, 0);
	ck_assert_ptr_null(t);
	ASSERT_MSG_HAS(err, "\"m.w\"");
	ASSERT_MSG_HAS(err, "BF16");
	ASSERT_MSG_HAS(err, "F32");
	ASSERT_MSG_HAS(err, p);

	/* wrong shape: both shown */
	rc = ms_checkpoint_get(&ck, "m.w", MS_DTYPE_BF16, 2, (int64_t[]){3, 2}, &t, &err);
	ck_assert_int_lt(rc, 0);
	ck_assert_ptr_null(t);
	ASSERT_MSG_HAS(err, "\"m.w\"");
	ASSERT_MSG_HAS(err, "[2, 3]");
	ASSERT_MSG_HAS(err, "[3, 2]");
	ASSERT_MSG_HAS(err, p);

	/* wrong rank, same element count */
	rc = ms_checkpoint_get(&ck, "m.w", MS_DTYPE_ANY, 1, (int64_t[]){6}, &t, &err);
	ck_assert_int_lt(rc, 0);
	ASSERT_MSG_HAS(err, "[2, 3]");
	ASSERT_MSG_HAS(err, "[6]");

	/* a prefix of the right shape is not the right shape */
	rc = ms_checkpoint_get(&ck, "m.w", MS_DTYPE_ANY, 3, (int64_t[]){2, 3, 1}, &t, &err);
	ck_assert_int_lt(rc, 0);
	ASSERT_MSG_HAS(err, "[2, 3, 1]");

	/* get_f32 checks the shape too */
	float *f = (float *)1;
	rc = ms_checkpoint_get_f32(&ck, "m.w", 1, (int64_t[]){6}, &f, &err);
	ck_assert_int_lt(rc, 0);
	ck_assert_ptr_null(f);
	rc = ms_checkpoint_get_f32(&ck, "nope", 1, (int64_t[]){6}, &f, &err);
	ck_assert_int_eq(rc, -ENOENT);
	ASSERT_MSG_HAS(err, "\"nope\"");

	/* and the right request still works after all those */
	ck_assert_int_eq(ms_checkpoint_get(&ck, "m.w", MS_DTYPE_BF16, 2, (int64_t[]){2, 3}, &t, &err),
			 0);
	ck_assert_ptr_nonnull(t);
	ms_checkpoint_close(&ck);
	free(p);
	free(d);
}
END_TEST

/* ---- folders: single file and sharded ---- */

START_TEST(test_dir_single_file)
{
	char *d = new_dir();
	const int32_t v[2] = {7, -9};
	char *p = st_write(d, "model.safetensors",
			   "{\"x\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8);
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open(&ck, d, &err) == 0, "%s", err.msg);
	const struct ms_tensor *t;
	ck_assert_int_eq(ms_checkpoint_get(&ck, "x", MS_DTYPE_I32, 1, (int64_t[]){2}, &t, &err), 0);
	ck_assert_int_eq(memcmp(t->data, v, 8), 0);
	ck_assert_str_eq(ms_checkpoint_file_of(&ck, t), p);
	ms_checkpoint_close(&ck);
	free(p);
	free(d);
}
END_TEST

START_TEST(test_dir_without_checkpoint)
{
	char *d = new_dir();
	char *other = text_write(d, "config.json", "{}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	int rc = ms_checkpoint_open(&ck, d, &err);
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_int_eq(err.code, -ENOENT);
	ASSERT_MSG_HAS(err, d);
	ck_assert_ptr_null(ck.dir);
	ms_checkpoint_close(&ck);
	/* a folder that does not exist at all */
	char *nd = xasprintf("%s/nonexistent", d);
	ck_assert_int_eq(ms_checkpoint_open(&ck, nd, &err), -ENOENT);
	ASSERT_MSG_HAS(err, nd);
	free(nd);
	free(other);
	free(d);
}
END_TEST

START_TEST(test_dir_single_file_bad)
{
	char *d = new_dir();
	char *p = st_write(d, "model.safetensors", "{\"x\":", NULL, 0);
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_checkpoint_open(&ck, d, &err), -EBADMSG);
	ASSERT_MSG_HAS(err, p);
	ck_assert_ptr_null(ck.dir);
	ck_assert_ptr_null(ck.files);
	free(p);
	free(d);
}
END_TEST

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

/* shard 1: a (F32 [2]) and x (F32 [1] = 1.0); shard 2: b (F32 [1] = 3.0)
 * and x (F32 [1] = 2.0). */
static void write_two_shards(const char *d, char **p1, char **p2)
{
	const float d1[3] = {10.0f, 11.0f, 1.0f};
	const float d2[2] = {3.0f, 2.0f};
	*p1 = st_write(d, SHARD1,
		       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
		       d1, sizeof(d1));
	*p2 = st_write(d, SHARD2,
		       "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
		       d2, sizeof(d2));
}

static char *write_index(const char *d, const char *weight_map)
{
	char *text = xasprintf("{\"metadata\":{\"total_size\":20},\"weight_map\":%s}", weight_map);
	char *p = text_write(d, "model.safetensors.index.json", text);
	free(text);
	return p;
}

static float read1(const struct ms_checkpoint *ck, const char *name, int64_t n, int64_t i)
{
	float *f = NULL;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_get_f32(ck, name, 1, &n, &f, &err) == 0, "%s", err.msg);
	float v = f[i];
	free(f);
	return v;
}

START_TEST(test_sharded_weight_map_decides)
{
	char *d = new_dir(), *p1, *p2;
	write_two_shards(d, &p1, &p2);
	/* x is in both headers; the index assigns it to shard 2 */
	char *ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"x\":\"" SHARD2 "\",\"b\":\"" SHARD2 "\"}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_msg(ms_checkpoint_open(&ck, d, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(ck.n_files, 2);
	ck_assert_uint_eq(ck.n_tensors, 3);
	ck_assert(read1(&ck, "x", 1, 0) == 2.0f);
	ck_assert(read1(&ck, "a", 2, 1) == 11.0f);
	ck_assert(read1(&ck, "b", 1, 0) == 3.0f);
	ck_assert_str_eq(ms_checkpoint_file_of(&ck, ms_checkpoint_find(&ck, "x")), p2);
	ck_assert_str_eq(ms_checkpoint_file_of(&ck, ms_checkpoint_find(&ck, "a")), p1);
	ms_checkpoint_close(&ck);

	/* the other way round: x from shard 1 */
	free(ip);
	ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"x\":\"" SHARD1 "\",\"b\":\"" SHARD2 "\"}");
	ck_assert_msg(ms_checkpoint_open(&ck, d, &err) == 0, "%s", err.msg);
	ck_assert(read1(&ck, "x", 1, 0) == 1.0f);
	ck_assert_str_eq(ms_checkpoint_file_of(&ck, ms_checkpoint_find(&ck, "x")), p1);
	ms_checkpoint_close(&ck);

	/* a tensor of a shard's header that the index does not list at all is
	 * not loaded */
	free(ip);
	ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD2 "\"}");
	ck_assert_msg(ms_checkpoint_open(&ck, d, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(ck.n_tensors, 2);
	ck_assert_ptr_null(ms_checkpoint_find(&ck, "x"));
	ms_checkpoint_close(&ck);
	free(ip);
	free(p1);
	free(p2);
	free(d);
}
END_TEST

START_TEST(test_sharded_tensor_not_in_shard)
{
	char *d = new_dir(), *p1, *p2;
	write_two_shards(d, &p1, &p2);
	/* b lives in shard 2, the index says shard 1 */
	char *ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"x\":\"" SHARD2 "\"}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	int rc = ms_checkpoint_open(&ck, d, &err);
	ck_assert_int_lt(rc, 0);
	ASSERT_MSG_HAS(err, "\"b\"");
	ASSERT_MSG_HAS(err, SHARD1);
	ck_assert_ptr_null(ck.tensors);
	/* a name no shard has */
	free(ip);
	ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"ghost.w\":\"" SHARD2 "\"}");
	rc = ms_checkpoint_open(&ck, d, &err);
	ck_assert_int_lt(rc, 0);
	ASSERT_MSG_HAS(err, "\"ghost.w\"");
	ASSERT_MSG_HAS(err, SHARD2);
	free(ip);
	free(p1);
	free(p2);
	free(d);
}
END_TEST

START_TEST(test_sharded_missing_shard_file)
{
	char *d = new_dir(), *p1, *p2;
	write_two_shards(d, &p1, &p2);
	char *ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"c\":\"model-00003-of-00003.safetensors\"}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	int rc = ms_checkpoint_open(&ck, d, &err);
	ck_assert_int_eq(rc, -ENOENT);
	ASSERT_MSG_HAS(err, "model-00003-of-00003.safetensors");
	ck_assert_ptr_null(ck.files);
	free(ip);
	free(p1);
	free(p2);
	free(d);
}
END_TEST

START_TEST(test_sharded_bad_shard)
{
	char *d = new_dir(), *p1, *p2;
	write_two_shards(d, &p1, &p2);
	/* shard 2's header lies about x */
	free(p2);
	float z[2] = {0};
	p2 = st_write(d, SHARD2,
		      "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		      "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,8]}}",
		      z, sizeof(z));
	char *ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"x\":\"" SHARD1 "\",\"b\":\"" SHARD2 "\"}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	/* even a tensor the index puts elsewhere must be valid in its header */
	int rc = ms_checkpoint_open(&ck, d, &err);
	ck_assert_int_eq(rc, -EBADMSG);
	ASSERT_MSG_HAS(err, p2);
	ASSERT_MSG_HAS(err, "\"x\"");
	free(ip);
	free(p1);
	free(p2);
	free(d);
}
END_TEST

START_TEST(test_sharded_path_escape)
{
	static const char *const bad[] = {
		"\"../" SHARD1 "\"", "\"sub/" SHARD1 "\"", "\"/etc/passwd\"", "\"..\"",
		"\".hidden.safetensors\"", "\"\"", "5", "null", "[\"" SHARD1 "\"]",
	};
	char *d = new_dir(), *p1, *p2;
	write_two_shards(d, &p1, &p2);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *wm = xasprintf("{\"a\":\"" SHARD1 "\",\"evil.w\":%s}", bad[i]);
		char *ip = write_index(d, wm);
		struct ms_checkpoint ck;
		struct ms_err err = {0};
		int rc = ms_checkpoint_open(&ck, d, &err);
		ck_assert_msg(rc < 0, "weight_map value %s accepted", bad[i]);
		ASSERT_MSG_HAS(err, "\"evil.w\"");
		ASSERT_MSG_HAS(err, ip);
		ck_assert_ptr_null(ck.files);
		free(ip);
		free(wm);
	}
	free(p1);
	free(p2);
	free(d);
}
END_TEST

START_TEST(test_sharded_bad_index)
{
	static const char *const bad[] = {
		"{\"weight_map\": ",
		"[]",
		"{\"metadata\":{}}",
		"{\"weight_map\":[\"" SHARD1 "\"]}",
		"{\"weight_map\":\"" SHARD1 "\"}",
		"",
		"{\"weight_map\":{}}\n{\"weight_map\":{}}\n", /* not JSON: two documents */
	};
	char *d = new_dir(), *p1, *p2;
	write_two_shards(d, &p1, &p2);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *ip = text_write(d, "model.safetensors.index.json", bad[i]);
		struct ms_checkpoint ck;
		struct ms_err err = {0};
		int rc = ms_checkpoint_open(&ck, d, &err);
		ck_assert_msg(rc == -EBADMSG, "index %s: %d %s", bad[i], rc, err.msg);
		ASSERT_MSG_HAS(err, ip);
		free(ip);
	}
	/* duplicate key in weight_map */
	char *ip = write_index(d, "{\"a\":\"" SHARD1 "\",\"a\":\"" SHARD1 "\"}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_int_lt(ms_checkpoint_open(&ck, d, &err), 0);
	ASSERT_MSG_HAS(err, "\"a\"");
	free(ip);
	/* an empty weight_map is an empty checkpoint, not a crash */
	ip = write_index(d, "{}");
	if (ms_checkpoint_open(&ck, d, &err) == 0) {
		ck_assert_uint_eq(ck.n_tensors, 0);
		ms_checkpoint_close(&ck);
	}
	free(ip);
	free(p1);
	free(p2);
	free(d);
}
END_TEST

START_TEST(test_sharded_duplicate_across_shards)
{
	/* two index entries cannot name the same tensor; but the same name in
	 * two headers is fine when the index picks one (tested above). A shard
	 * whose own header repeats the assigned name is still refused. */
	char *d = new_dir();
	const float v[2] = {1, 2};
	char *p1 = st_write(d, SHARD1,
			    "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			    "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
			    v, sizeof(v));
	char *ip = write_index(d, "{\"x\":\"" SHARD1 "\"}");
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_checkpoint_open(&ck, d, &err), -EBADMSG);
	ASSERT_MSG_HAS(err, "\"x\"");
	ASSERT_MSG_HAS(err, p1);
	free(ip);
	free(p1);
	free(d);
}
END_TEST

/* ---- runner ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static Suite *safetensors_suite(void)
{
	Suite *s = suite_create("safetensors");
	TCase *bad = tcase_create("malformed");
	tcase_add_test(bad, test_shorter_than_8_bytes);
	tcase_add_test(bad, test_missing_file);
	tcase_add_test(bad, test_header_length_past_end);
	tcase_add_test(bad, test_header_length_huge);
	tcase_add_test(bad, test_header_invalid_json);
	tcase_add_test(bad, test_header_not_object);
	tcase_add_test(bad, test_entry_structure);
	tcase_add_test(bad, test_span_not_shape_times_dtype);
	tcase_add_test(bad, test_truncated_data);
	tcase_add_test(bad, test_begin_after_end);
	tcase_add_test(bad, test_offsets_past_data_even_if_empty);
	tcase_add_test(bad, test_overlapping_offsets);
	tcase_add_test(bad, test_duplicate_tensor_name);
	tcase_add_test(bad, test_unknown_dtype);
	tcase_add_test(bad, test_bad_shape_entry);
	tcase_add_test(bad, test_shape_overflow);
	tcase_add_test(bad, test_header_trailing_garbage);
	suite_add_tcase(s, bad);

	TCase *good = tcase_create("valid");
	tcase_add_test(good, test_every_dtype_reads_back);
	tcase_add_test(good, test_dtype_table);
	tcase_add_test(good, test_empty_header_and_padding);
	tcase_add_test(good, test_empty_tensor_inside_another);
	tcase_add_test(good, test_misaligned_offsets_read_as_f32);
	tcase_add_test(good, test_get_errors);
	suite_add_tcase(s, good);

	TCase *dir = tcase_create("folders");
	tcase_add_test(dir, test_dir_single_file);
	tcase_add_test(dir, test_dir_without_checkpoint);
	tcase_add_test(dir, test_dir_single_file_bad);
	tcase_add_test(dir, test_sharded_weight_map_decides);
	tcase_add_test(dir, test_sharded_tensor_not_in_shard);
	tcase_add_test(dir, test_sharded_missing_shard_file);
	tcase_add_test(dir, test_sharded_bad_shard);
	tcase_add_test(dir, test_sharded_path_escape);
	tcase_add_test(dir, test_sharded_bad_index);
	tcase_add_test(dir, test_sharded_duplicate_across_shards);
	suite_add_tcase(s, dir);
	return s;
}

int main(void)
{
	snprintf(g_root, sizeof(g_root), "/tmp/ms-test-safetensors.XXXXXX");
	if (!mkdtemp(g_root)) {
		perror("mkdtemp");
		return 1;
	}
	int failed = ms_check_run(safetensors_suite());
	nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return failed ? 1 : 0;
}
