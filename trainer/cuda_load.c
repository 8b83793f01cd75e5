/* Finds and loads the CUDA backend plugin next to the running executable
 * (<exe dir>/../lib/ctune first, the install layout, then <exe dir>/../lib,
 * the build tree's, then <exe dir>), resolved
 * through /proc/self/exe so neither PATH nor LD_LIBRARY_PATH matters. */
#include "cuda_plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *plugin_file = CUDA_PLUGIN_FILE;
static const struct cuda_plugin *loaded;

void cuda_plugin_set_file(const char *name) { plugin_file = name; }

int cuda_plugin_built(void) {
#ifdef CTUNE_CUDA_PLUGIN
  return 1;
#else
  return 0;
#endif
}

int cuda_plugin_load(const struct cuda_plugin **out, char *err, size_t errlen) {
  if (loaded) {
    *out = loaded;
    return 0;
  }
  char exe[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    snprintf(err, errlen, "cannot load the CUDA backend: /proc/self/exe: %s", strerror(errno));
    return -ENODEV;
  }
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  const char *const where[] = {"%s/../lib/ctune/%s", "%s/../lib/%s", "%s/%s"};
  void *h = NULL;
  char first[512] = "";
  for (size_t i = 0; i < sizeof(where) / sizeof(where[0]) && !h; i++) {
    snprintf(path, sizeof(path), where[i], exe, plugin_file);
    if (access(path, F_OK) != 0) continue;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    /* a file that is there but does not load (a CUDA library missing, a
     * wrong architecture) is the sentence worth showing */
    if (!h && !first[0]) snprintf(first, sizeof(first), "%s", dlerror());
  }
  if (!h) {
    if (first[0])
      snprintf(err, errlen, "cannot load the CUDA backend: %s", first);
    else
      snprintf(err, errlen,
               "cannot load the CUDA backend: %s not found in %s/../lib/ctune, "
               "%s/../lib or %s",
               plugin_file, exe, exe, exe);
    return -ENODEV;
  }
  const struct cuda_plugin *p = dlsym(h, CUDA_PLUGIN_SYMBOL);
  if (!p || p->abi != CUDA_PLUGIN_ABI || !p->ops || !p->last_error || !p->device_count ||
      !p->probe || p->loss_every < 1 || !p->set_data || !p->set_order || !p->train_next ||
      !p->take_loss || !p->evaluate_set || !p->nccl_id) {
    snprintf(err, errlen,
             "cannot load the CUDA backend: %s is not a ctune CUDA backend of "
             "ABI %d (%s)",
             path, CUDA_PLUGIN_ABI, p ? "ABI mismatch" : dlerror());
    dlclose(h);
    return -ENODEV;
  }
  loaded = p;
  *out = p;
  return 0;
}
