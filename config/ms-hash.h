/*
 * ms-hash.h: the one 64-bit mixing function (splitmix64's finalizer,
 * Steele, Lea & Flood 2014): a bijection whose every input bit flips about
 * half the output bits. Used for the tokenizer's pair table, the prefix
 * cache's block hashes and the sampler's seeding; one definition so that
 * a weak copy cannot creep into one of them.
 */
#ifndef MS_HASH_H
#define MS_HASH_H

#include <stdint.h>

static inline uint64_t ms_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#endif
