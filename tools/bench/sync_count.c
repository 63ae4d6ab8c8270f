/* LD_PRELOAD shim for the GPU check: counts the CUDA runtime calls that block the host until
 * the device catches up (stream/device/event synchronize, cudaMemcpy) and writes the counts as
 * JSON to $AMPSCOPE_SYNC_COUNT_OUT at exit. Torch calls libcudart dynamically, so its syncs
 * (.item(), .cpu()) are counted too. Build: cc -shared -fPIC -O2 sync_count.c -o libsync_count.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cudaError_t;
typedef void* cudaStream_t;
typedef void* cudaEvent_t;

static atomic_long g_counts[4];
static const char* const g_names[4] = {"cudaStreamSynchronize", "cudaDeviceSynchronize",
                                       "cudaEventSynchronize", "cudaMemcpy"};

#define AMPSCOPE_FORWARD(idx, name, params, args)                               \
  cudaError_t name params {                                                     \
    static cudaError_t(*real) params;                                           \
    if (!real) real = (cudaError_t(*) params)dlsym(RTLD_NEXT, #name);           \
    atomic_fetch_add(&g_counts[idx], 1);                                        \
    return real args;                                                           \
  }

AMPSCOPE_FORWARD(0, cudaStreamSynchronize, (cudaStream_t s), (s))
AMPSCOPE_FORWARD(1, cudaDeviceSynchronize, (void), ())
AMPSCOPE_FORWARD(2, cudaEventSynchronize, (cudaEvent_t e), (e))
AMPSCOPE_FORWARD(3, cudaMemcpy, (void* dst, const void* src, size_t n, int kind), (dst, src, n, kind))

__attribute__((destructor)) static void write_counts(void) {
  const char* path = getenv("AMPSCOPE_SYNC_COUNT_OUT");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (!f) return;
  long total = 0;
  fprintf(f, "{");
  for (int i = 0; i < 4; ++i) {
    long n = atomic_load(&g_counts[i]);
    total += n;
    fprintf(f, "\"%s\": %ld, ", g_names[i], n);
  }
  fprintf(f, "\"total\": %ld}\n", total);
  fclose(f);
}
