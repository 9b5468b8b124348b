#define GL_NONE 0xffffffffffffffffULL
// Fold one block's figures into the summary acc[0..2] (0: OR of flags; 1: max (max1) or min;
// 2: min); the last block to arrive (acc[3] counts them) moves the totals to acc[4..6] and puts
// the identities back for the next launch. Called by one thread per block, once.
__device__ void gl_summary(unsigned long long* acc, const unsigned long long flags,
                           const unsigned long long v1, const int max1,
                           const unsigned long long v2, const unsigned long long nblocks) {
    const unsigned long long id1 = max1 ? 0ULL : GL_NONE;
    if (flags) atomicOr(&acc[0], flags);
    if (v1 != id1) { if (max1) atomicMax(&acc[1], v1); else atomicMin(&acc[1], v1); }
    if (v2 != GL_NONE) atomicMin(&acc[2], v2);
    __threadfence();
    if (atomicAdd(&acc[3], 1ULL) == nblocks - 1) {
        __threadfence();
        acc[4] = atomicExch(&acc[0], 0ULL);
        acc[5] = atomicExch(&acc[1], id1);
        acc[6] = atomicExch(&acc[2], GL_NONE);
        atomicExch(&acc[3], 0ULL);
    }
}
