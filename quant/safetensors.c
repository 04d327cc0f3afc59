/*
 * safetensors.c: see safetensors.h. The checks here are the only thing
 * standing between a lying file and an out-of-bounds read in a kernel, so
 * every offset is validated against the mapping before use, with overflow-safe
 * arithmetic.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wmat.h"      /* bf16/f16 decoding */
#include "ms-json.h"
#include "ms-mapguard.h"

/* The safetensors library refuses headers above 100 MB; so do we. */
#define MS_ST_MAX_HEADER (100u * 1024u * 1024u)

static const struct {
	const char *name;
	size_t size;
} dtype_info[MS_DTYPE_COUNT] = {
	[MS_DTYPE_F32] = {"F32", 4},      [MS_DTYPE_F16] = {"F16", 2},
	[MS_DTYPE_BF16] = {"BF16", 2},    [MS_DTYPE_U8] = {"U8", 1},
	[MS_DTYPE_I8] = {"I8", 1},        [MS_DTYPE_I32] = {"I32", 4},
	[MS_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
};

size_t ms_dtype_size(enum ms_dtype dt)
{
	return (dt >= 0 && dt < MS_DTYPE_COUNT) ? dtype_info[dt].size : 0;
}

const char *ms_dtype_name(enum ms_dtype dt)
{
	return (dt >= 0 && dt < MS_DTYPE_COUNT) ? dtype_info[dt].name : "?";
}

static int dtype_from_name(const char *s)
{
	for (int i = 0; i < MS_DTYPE_COUNT; i++)
		if (strcmp(s, dtype_info[i].name) == 0)
			return i;
	return -1;
}

const char *ms_shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
	size_t n = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < ndim && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
	return buf;
}

/* ---- one file ---- */

static int map_file(struct ms_st_file *f, const char *path, struct ms_err *err)
{
	memset(f, 0, sizeof(*f));
	f->guard = -1;
	f->path = strdup(path);
	if (!f->path)
		return ms_err_set(err, -ENOMEM, "out of memory");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ms_err_set(err, -errno, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return ms_err_set(err, -e, "%s: cannot stat: %s", path, strerror(e));
	}
	f->size = (size_t)st.st_size;
	if (f->size > 0) {
		f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (f->map == MAP_FAILED) {
			int e = errno;
			f->map = NULL;
			close(fd);
			return ms_err_set(err, -e, "%s: cannot map: %s", path, strerror(e));
		}
	}
	close(fd); /* the mapping keeps the file alive */
	/* every read of the mapping from here on, the header's included, may
	 * meet a file truncated since the fstat */
	if (f->map) {
		int slot = ms_mapguard_add(f->map, f->size, f->path, err);
		if (slot < 0)
			return slot;
		f->guard = slot;
	}
	return 0;
}

static void unmap_file(struct ms_st_file *f)
{
	ms_mapguard_remove(f->guard);
	if (f->map)
		munmap(f->map, f->size);
	free(f->path);
	memset(f, 0, sizeof(*f));
}

struct span {
	uint64_t begin, end;
	const char *name;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : (x->end > y->end);
}

/* Parse one tensor entry of a header. */
static int parse_entry(const struct ms_st_file *f, const cJSON *e, uint64_t data_size,
		       struct ms_tensor *t, struct ms_err *err)
{
	const char *nm = e->string;
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
	    cJSON_GetArraySize(off) != 2)
		return ms_err_set(err, -EBADMSG,
				  "%s: tensor \"%s\": header entry needs dtype, shape and a 2-element data_offsets",
				  f->path, nm);
	int d = dtype_from_name(dt->valuestring);
	if (d < 0)
		return ms_err_set(err, -ENOTSUP, "%s: tensor \"%s\": unsupported dtype \"%s\"", f->path, nm,
				  dt->valuestring);
	int nd = cJSON_GetArraySize(sh);
	if (nd > MS_MAX_DIMS)
		return ms_err_set(err, -ENOTSUP, "%s: tensor \"%s\": %d dimensions (at most %d)", f->path,
				  nm, nd, MS_MAX_DIMS);
	memset(t, 0, sizeof(*t));
	t->dtype = (enum ms_dtype)d;
	t->ndim = nd;
	uint64_t count = 1;
	for (int i = 0; i < nd; i++) {
		const cJSON *x = cJSON_GetArrayItem(sh, i);
		/* 2^53: the largest integer a JSON double holds exactly. */
		if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9007199254740992.0 ||
		    x->valuedouble != (double)(uint64_t)x->valuedouble)
			return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\": shape[%d] is not a valid size",
					  f->path, nm, i);
		t->shape[i] = (int64_t)x->valuedouble;
		if (t->shape[i] && count > UINT64_MAX / (uint64_t)t->shape[i])
			return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\": shape overflows", f->path, nm);
		count *= (uint64_t)t->shape[i];
	}
	uint64_t o[2];
	for (int i = 0; i < 2; i++) {
		const cJSON *x = cJSON_GetArrayItem(off, i);
		if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9007199254740992.0 ||
		    x->valuedouble != (double)(uint64_t)x->valuedouble)
			return ms_err_set(err, -EBADMSG,
					  "%s: tensor \"%s\": data_offsets[%d] is not a valid offset", f->path,
					  nm, i);
		o[i] = (uint64_t)x->valuedouble;
	}
	if (o[0] > o[1])
		return ms_err_set(err, -EBADMSG,
				  "%s: tensor \"%s\": data_offsets begin %llu > end %llu", f->path, nm,
				  (unsigned long long)o[0], (unsigned long long)o[1]);
	if (o[1] > data_size)
		return ms_err_set(err, -EBADMSG,
				  "%s: tensor \"%s\": data_offsets [%llu, %llu] outside the %llu-byte data "
				  "section (truncated file?)",
				  f->path, nm, (unsigned long long)o[0], (unsigned long long)o[1],
				  (unsigned long long)data_size);
	uint64_t esz = dtype_info[d].size;
	if (count > UINT64_MAX / esz)
		return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\": shape x dtype size overflows",
				  f->path, nm);
	if (o[1] - o[0] != count * esz) {
		char sb[128];
		return ms_err_set(err, -EBADMSG,
				  "%s: tensor \"%s\": %llu bytes in data_offsets but shape %s of %s needs %llu",
				  f->path, nm, (unsigned long long)(o[1] - o[0]),
				  ms_shape_str(sb, sizeof(sb), nd, t->shape), dtype_info[d].name,
				  (unsigned long long)(count * esz));
	}
	t->nbytes = (size_t)(o[1] - o[0]);
	t->data = t->nbytes ? (const uint8_t *)f->map + f->data_start + o[0] : NULL;
	return 0;
}

/* weight_map of a sharded checkpoint: name -> file index, sorted by name. */
struct wm_entry {
	const char *name;
	int file;
	bool seen;
};

struct wm {
	struct wm_entry *e;
	size_t n;
};

static int cmp_wm(const void *a, const void *b)
{
	return strcmp(((const struct wm_entry *)a)->name, ((const struct wm_entry *)b)->name);
}

static struct wm_entry *wm_find(const struct wm *w, const char *name)
{
	struct wm_entry key = {name, 0, false};
	return bsearch(&key, w->e, w->n, sizeof(key), cmp_wm);
}

/* Parse the header of mapped file file_idx and append its tensors. With a
 * weight map, keep only the tensors it assigns to this file: a shard's header
 * may list tensors that the index puts elsewhere. */
static int parse_header(struct ms_checkpoint *ck, int file_idx, struct wm *keep,
			struct ms_err *err)
{
	const struct ms_st_file *f = &ck->files[file_idx];
	if (f->size < 8)
		return ms_err_set(err, -EBADMSG,
				  "%s: truncated: %zu bytes, shorter than the 8-byte header length", f->path,
				  f->size);
	uint64_t hlen = 0;
	const uint8_t *p = f->map;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | p[i];
	if (hlen > f->size - 8)
		return ms_err_set(err, -EBADMSG,
				  "%s: header length %llu runs past the end of the file (%zu bytes)", f->path,
				  (unsigned long long)hlen, f->size);
	if (hlen > MS_ST_MAX_HEADER)
		return ms_err_set(err, -EBADMSG, "%s: header length %llu exceeds 100 MB", f->path,
				  (unsigned long long)hlen);
	ck->files[file_idx].data_start = 8 + (size_t)hlen;
	uint64_t data_size = f->size - 8 - hlen;
	/* Only the space padding the format allows may follow the JSON. */
	const char *hdr = (const char *)p + 8, *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, false);
	while (root && end < hdr + hlen && (*end == ' ' || *end == '\n' || *end == '\t' ||
					    *end == '\r' || *end == '\0'))
		end++;
	if (!root || !cJSON_IsObject(root) || end != hdr + hlen) {
		cJSON_Delete(root);
		return ms_err_set(err, -EBADMSG, "%s: header is not a valid JSON object", f->path);
	}
	int n = cJSON_GetArraySize(root);
	int rc = 0;
	struct span *spans = calloc((size_t)n + 1, sizeof(*spans));
	struct ms_tensor *nt = realloc(ck->tensors, (ck->n_tensors + (size_t)n + 1) * sizeof(*nt));
	if (!spans || !nt) {
		free(spans);
		if (nt)
			ck->tensors = nt;
		cJSON_Delete(root);
		return ms_err_set(err, -ENOMEM, "%s: out of memory", f->path);
	}
	ck->tensors = nt;
	int ns = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, root) {
		if (strcmp(e->string, "__metadata__") == 0)
			continue;
		struct ms_tensor t;
		if ((rc = parse_entry(f, e, data_size, &t, err)))
			break;
		spans[ns++] = (struct span){0, 0, e->string};
		/* Offsets again for the overlap check (parse_entry validated them). */
		const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
		spans[ns - 1].begin = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
		spans[ns - 1].end = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
		if (keep) {
			struct wm_entry *we = wm_find(keep, e->string);
			if (!we || we->file != file_idx)
				continue;
			we->seen = true;
		}
		t.name = strdup(e->string);
		if (!t.name) {
			rc = ms_err_set(err, -ENOMEM, "%s: out of memory", f->path);
			break;
		}
		t.file = file_idx;
		ck->tensors[ck->n_tensors++] = t;
	}
	if (!rc) {
		qsort(spans, (size_t)ns, sizeof(*spans), cmp_span);
		uint64_t end = 0;
		const char *prev = NULL;
		for (int i = 0; i < ns; i++) {
			if (spans[i].begin == spans[i].end)
				continue; /* empty tensors occupy nothing */
			if (spans[i].begin < end) {
				rc = ms_err_set(err, -EBADMSG,
						"%s: tensors \"%s\" and \"%s\" have overlapping data_offsets",
						f->path, prev, spans[i].name);
				break;
			}
			end = spans[i].end;
			prev = spans[i].name;
		}
	}
	free(spans);
	cJSON_Delete(root);
	return rc;
}

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const struct ms_tensor *)a)->name, ((const struct ms_tensor *)b)->name);
}

/* Sort by name and reject duplicates (a header may repeat a key: JSON
 * parsers disagree on which copy wins, so we refuse to pick). */
static int finish(struct ms_checkpoint *ck, struct ms_err *err)
{
	if (ck->n_tensors > 1) /* (tensors may be NULL when there are none) */
		qsort(ck->tensors, ck->n_tensors, sizeof(*ck->tensors), cmp_tensor);
	for (size_t i = 1; i < ck->n_tensors; i++)
		if (strcmp(ck->tensors[i - 1].name, ck->tensors[i].name) == 0)
			return ms_err_set(err, -EBADMSG, "%s: duplicate tensor name \"%s\"",
					  ck->files[ck->tensors[i].file].path, ck->tensors[i].name);
	return 0;
}

static int add_file(struct ms_checkpoint *ck, const char *path, struct ms_err *err)
{
	struct ms_st_file *nf = realloc(ck->files, (size_t)(ck->n_files + 1) * sizeof(*nf));
	if (!nf)
		return ms_err_set(err, -ENOMEM, "out of memory");
	ck->files = nf;
	int rc = map_file(&ck->files[ck->n_files], path, err);
	ck->n_files++; /* counted even on failure, so close() frees the path */
	return rc;
}

/* A header read from a file that shrank under it is zeros: say so, not
 * what the zeros looked like. */
static void close_failed(struct ms_checkpoint *ck, struct ms_err *err)
{
	struct ms_err fault = {0};
	if (ms_checkpoint_check(ck, &fault) && err)
		*err = fault;
	ms_checkpoint_close(ck);
}

int ms_checkpoint_open_file(struct ms_checkpoint *ck, const char *path, struct ms_err *err)
{
	memset(ck, 0, sizeof(*ck));
	int rc = add_file(ck, path, err);
	if (!rc)
		rc = parse_header(ck, 0, NULL, err);
	if (!rc)
		rc = finish(ck, err);
	if (rc)
		close_failed(ck, err);
	return rc;
}

/* ---- sharded: the index's weight_map decides ---- */

static int open_index(struct ms_checkpoint *ck, const char *index_path, struct ms_err *err)
{
	cJSON *root;
	int rc = ms_json_read_file(index_path, &root, err);
	if (rc == -EINVAL) /* not JSON: a bad checkpoint, as a bad header is */
		err->code = rc = -EBADMSG;
	if (rc)
		return rc;
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(map)) {
		cJSON_Delete(root);
		return ms_err_set(err, -EBADMSG, "%s: no \"weight_map\" object", index_path);
	}
	size_t n = (size_t)cJSON_GetArraySize(map);
	struct wm w = {calloc(n + 1, sizeof(struct wm_entry)), 0};
	if (!w.e) {
		cJSON_Delete(root);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	const cJSON *it;
	cJSON_ArrayForEach(it, map) {
		/* A shard is a plain file name beside the index: no paths out. */
		if (!cJSON_IsString(it) || strchr(it->valuestring, '/') || it->valuestring[0] == '.' ||
		    !it->valuestring[0]) {
			rc = ms_err_set(err, -EBADMSG,
					"%s: weight_map[\"%s\"] must name a file in the checkpoint folder",
					index_path, it->string);
			goto out;
		}
		int fi = -1;
		for (int i = 0; i < ck->n_files && fi < 0; i++) {
			const char *base = strrchr(ck->files[i].path, '/');
			if (strcmp(base ? base + 1 : ck->files[i].path, it->valuestring) == 0)
				fi = i;
		}
		if (fi < 0) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", ck->dir, it->valuestring);
			if ((rc = add_file(ck, path, err)))
				goto out;
			fi = ck->n_files - 1;
		}
		w.e[w.n++] = (struct wm_entry){it->string, fi, false};
	}
	qsort(w.e, w.n, sizeof(*w.e), cmp_wm);
	for (size_t i = 1; i < w.n; i++)
		if (strcmp(w.e[i - 1].name, w.e[i].name) == 0) {
			rc = ms_err_set(err, -EBADMSG, "%s: duplicate tensor name \"%s\" in weight_map",
					index_path, w.e[i].name);
			goto out;
		}
	for (int i = 0; i < ck->n_files && !rc; i++)
		rc = parse_header(ck, i, &w, err);
	for (size_t i = 0; i < w.n && !rc; i++)
		if (!w.e[i].seen)
			rc = ms_err_set(err, -EBADMSG,
					"%s: tensor \"%s\" is in weight_map but not in that file's header",
					ck->files[w.e[i].file].path, w.e[i].name);
out:
	free(w.e);
	cJSON_Delete(root);
	return rc;
}

int ms_checkpoint_open(struct ms_checkpoint *ck, const char *dir, struct ms_err *err)
{
	memset(ck, 0, sizeof(*ck));
	ck->dir = strdup(dir);
	if (!ck->dir)
		return ms_err_set(err, -ENOMEM, "out of memory");
	char path[4096];
	int rc;
	/* transformers' order: a single model.safetensors wins over an index. */
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	if (access(path, F_OK) == 0) {
		rc = add_file(ck, path, err);
		if (!rc)
			rc = parse_header(ck, 0, NULL, err);
	} else {
		snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
		if (access(path, F_OK) == 0)
			rc = open_index(ck, path, err);
		else
			rc = ms_err_set(err, -ENOENT,
					"%s: no model.safetensors and no model.safetensors.index.json", dir);
	}
	if (!rc)
		rc = finish(ck, err);
	if (rc)
		close_failed(ck, err);
	return rc;
}

const struct ms_tensor *ms_checkpoint_find(const struct ms_checkpoint *ck, const char *name)
{
	if (!ck->n_tensors)
		return NULL;
	struct ms_tensor key = {.name = (char *)name};
	return bsearch(&key, ck->tensors, ck->n_tensors, sizeof(key), cmp_tensor);
}

bool ms_checkpoint_has_prefix(const struct ms_checkpoint *ck, const char *prefix)
{
	/* lower bound of prefix in the sorted names */
	size_t lo = 0, hi = ck->n_tensors, n = strlen(prefix);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(ck->tensors[mid].name, prefix) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < ck->n_tensors && strncmp(ck->tensors[lo].name, prefix, n) == 0;
}

const char *ms_checkpoint_file_of(const struct ms_checkpoint *ck, const struct ms_tensor *t)
{
	return ck->files[t->file].path;
}

int ms_checkpoint_get(const struct ms_checkpoint *ck, const char *name, enum ms_dtype dtype,
		      int ndim, const int64_t *shape, const struct ms_tensor **out,
		      struct ms_err *err)
{
	const struct ms_tensor *t = ms_checkpoint_find(ck, name);
	*out = NULL;
	if (!t)
		return ms_err_set(err, -ENOENT, "%s: tensor \"%s\" is missing from the checkpoint",
				  ck->dir ? ck->dir : (ck->n_files ? ck->files[0].path : "?"), name);
	if (dtype != MS_DTYPE_ANY && t->dtype != dtype)
		return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" has dtype %s, expected %s",
				  ms_checkpoint_file_of(ck, t), name, ms_dtype_name(t->dtype),
				  ms_dtype_name(dtype));
	bool ok = t->ndim == ndim;
	for (int i = 0; ok && i < ndim; i++)
		ok = t->shape[i] == shape[i];
	if (!ok) {
		char a[128], b[128];
		return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" has shape %s, expected %s",
				  ms_checkpoint_file_of(ck, t), name,
				  ms_shape_str(a, sizeof(a), t->ndim, t->shape),
				  ms_shape_str(b, sizeof(b), ndim, shape));
	}
	*out = t;
	return 0;
}

void ms_checkpoint_release(const struct ms_checkpoint *ck, const struct ms_tensor *t)
{
	(void)ck;
	if (!t->nbytes)
		return;
	/* Whole pages inside the tensor only: neighbours may still be needed. */
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t b = ((uintptr_t)t->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
	uintptr_t e = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)pg - 1);
	if (e > b)
		madvise((void *)b, e - b, MADV_DONTNEED);
}

int ms_checkpoint_check(const struct ms_checkpoint *ck, struct ms_err *err)
{
	for (int i = 0; i < ck->n_files; i++) {
		const struct ms_st_file *f = &ck->files[i];
		size_t off;
		if (!ms_mapguard_faulted(f->guard, &off))
			continue;
		const char *tensor = NULL;
		for (size_t j = 0; j < ck->n_tensors && !tensor; j++) {
			const struct ms_tensor *t = &ck->tensors[j];
			size_t b = (size_t)((const uint8_t *)t->data - (const uint8_t *)f->map);
			if (t->file == i && t->nbytes && off >= b && off - b < t->nbytes)
				tensor = t->name;
		}
		struct stat st;
		char now[64] = "it is gone";
		if (stat(f->path, &st) == 0)
			snprintf(now, sizeof(now), "now %lld bytes", (long long)st.st_size);
		if (tensor)
			return ms_err_set(err, -EIO, "%s: tensor \"%s\" could not be read: the file "
					  "shrank while mapped (%zu bytes when opened, %s; byte %zu failed)",
					  f->path, tensor, f->size, now, off);
		return ms_err_set(err, -EIO, "%s: could not be read: the file shrank while mapped "
				  "(%zu bytes when opened, %s; byte %zu failed)", f->path, f->size, now,
				  off);
	}
	return 0;
}

void ms_checkpoint_close(struct ms_checkpoint *ck)
{
	if (!ck)
		return;
	for (int i = 0; i < ck->n_files; i++)
		unmap_file(&ck->files[i]);
	free(ck->files);
	for (size_t i = 0; i < ck->n_tensors; i++)
		free(ck->tensors[i].name);
	free(ck->tensors);
	free(ck->dir);
	memset(ck, 0, sizeof(*ck));
}

int ms_checkpoint_get_f32(const struct ms_checkpoint *ck, const char *name, int ndim,
			  const int64_t *shape, float **out, struct ms_err *err)
{
	const struct ms_tensor *t;
	*out = NULL;
	int rc = ms_checkpoint_get(ck, name, MS_DTYPE_ANY, ndim, shape, &t, err);
	if (rc)
		return rc;
	if (!(t->dtype == MS_DTYPE_F32 || t->dtype == MS_DTYPE_F16 || t->dtype == MS_DTYPE_BF16))
		return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" has dtype %s, expected F32, F16 or BF16",
				  ms_checkpoint_file_of(ck, t), name, ms_dtype_name(t->dtype));
	size_t n = t->nbytes / ms_dtype_size(t->dtype);
	float *b = malloc((n ? n : 1) * sizeof(float));
	if (!b)
		return ms_err_set(err, -ENOMEM, "%s: out of memory", name);
	/* Element by element through memcpy: the mapping need not be aligned. */
	const uint8_t *p = t->data;
	for (size_t i = 0; i < n; i++) {
		if (t->dtype == MS_DTYPE_F32) {
			memcpy(&b[i], p + 4 * i, 4);
		} else {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);
			b[i] = t->dtype == MS_DTYPE_BF16 ? ms_bf16_to_f32(h) : ms_f16_to_f32(h);
		}
	}
	*out = b;
	return 0;
}
