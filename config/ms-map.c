/* ms-map.c: see ms-map.h. */
#include "ms-map.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define MAP_HDR 64 /* the mapping's length, before the data */

static size_t map_len(const void *p)
{
	size_t len;
	memcpy(&len, (const uint8_t *)p - MAP_HDR, sizeof(len));
	return len;
}

void *ms_map_alloc(size_t n)
{
	if (n > SIZE_MAX - MAP_HDR)
		return NULL;
	size_t len = n + MAP_HDR;
	void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return NULL;
	memcpy(base, &len, sizeof(len));
	return (uint8_t *)base + MAP_HDR;
}

size_t ms_map_size(const void *p)
{
	return map_len(p) - MAP_HDR;
}

void ms_map_free(void *p)
{
	if (p)
		munmap((uint8_t *)p - MAP_HDR, map_len(p));
}
