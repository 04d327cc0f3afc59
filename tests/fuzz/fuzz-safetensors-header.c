/* safetensors-header: checkpoint files as quant/safetensors.c opens them.
 * Input: one part is a single model.safetensors; two or more parts are a
 * sharded checkpoint: model.safetensors.index.json, then the shards
 * a.safetensors and b.safetensors. Every tensor opened is found by name
 * and lies inside its file; small float tensors are read as fp32. */
#include "fuzz.h"
#include "quant.h"
#include "safetensors.h"

#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	char path[512];
	snprintf(path, sizeof(path), "%s/single", fuzz_dir());
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/sharded", fuzz_dir());
	mkdir(path, 0700);
	return 0;
}

static void check_tensors(const struct ms_checkpoint *ck)
{
	for (size_t i = 0; i < ck->n_tensors; i++) {
		const struct ms_tensor *t = &ck->tensors[i];
		FUZZ_CHECK(ms_checkpoint_find(ck, t->name) == t, "tensor %s not found by name", t->name);
		FUZZ_CHECK(t->file >= 0 && t->file < ck->n_files, "tensor %s: file %d", t->name, t->file);
		const struct ms_st_file *f = &ck->files[t->file];
		if (t->nbytes) {
			const uint8_t *b = t->data, *m = f->map;
			FUZZ_CHECK(b >= m + f->data_start && b + t->nbytes <= m + f->size,
				   "tensor %s outside its file", t->name);
		}
		if (ms_dtype_is_float(t->dtype) && t->nbytes <= 4096 && t->ndim >= 1) {
			float *v = NULL;
			struct ms_err err = {0};
			if (!ms_checkpoint_get_f32(ck, t->name, t->ndim, t->shape, &v, &err))
				FUZZ_CHECK(v || !t->nbytes, "tensor %s read as nothing", t->name);
			free(v);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *part[3] = {0};
	size_t n = size, len[3] = {0};
	int parts = 0;
	while (parts < 3 && fuzz_part(&p, &n, &part[parts], &len[parts]))
		parts++;
	char dir[512];
	if (parts == 1) {
		fuzz_file("single/model.safetensors", part[0], len[0]);
		snprintf(dir, sizeof(dir), "%s/single", fuzz_dir());
	} else {
		fuzz_file("sharded/model.safetensors.index.json", part[0], len[0]);
		fuzz_file("sharded/a.safetensors", part[1], len[1]);
		if (parts == 3)
			fuzz_file("sharded/b.safetensors", part[2], len[2]);
		else
			fuzz_file("sharded/b.safetensors", NULL, 0);
		snprintf(dir, sizeof(dir), "%s/sharded", fuzz_dir());
	}
	struct ms_checkpoint ck;
	struct ms_err err = {0};
	int rc = ms_checkpoint_open(&ck, dir, &err);
	if (!rc)
		check_tensors(&ck);
	else
		FUZZ_CHECK(err.msg[0] && ck.n_tensors == 0, "refused without a message (%d)", rc);
	ms_checkpoint_close(&ck);
	return 0;
}
