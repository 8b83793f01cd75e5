/* The training loop. It owns the data, the split, the shuffle RNG and the
 * checkpoint; the backend owns parameters and optimiser state. */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "clock.h"
#include "data.h"
#include "dist.h"
#include "exit_codes.h"
#include "log.h"
#include "optim.h"
#include "report.h"
#include "splitmix.h"
#include "cuda_plugin.h"

static const char *const model_name[] = {"mlp", "cnn"};

/* Images normalised and handed to evaluate per call at most (the host keeps
 * data sets as uint8: 2048 28x28 images are 6.4 MB of floats, CIFAR's 25
 * MB); backends split it further by their own capacity. */
#define EVAL_CHUNK 2048

const char *train_backends_built(void) { return cuda_plugin_built() ? "cpu, cuda" : "cpu"; }

/* The CUDA plugin once loaded (never unloaded: its backend may be alive). */
static const struct cuda_plugin *cuda;

/* Backend failures: out of memory and no device have their own codes; any
 * other error (including -EINVAL: the loop validated everything it passes)
 * is a bug. */
static int exit_for_errno(int e) {
  switch (e) {
  case -ENOMEM:
    return TRAIN_EXIT_OOM;
  case -ENODEV:
    return TRAIN_EXIT_NO_DEVICE;
  default:
    return TRAIN_EXIT_INTERNAL;
  }
}

/* The backend's own sentence about its last failure, or strerror. */
static const char *backend_why(const struct backend_ops *ops, int rc) {
  if (cuda && ops == cuda->ops && cuda->last_error()[0]) return cuda->last_error();
  return strerror(-rc);
}

/* Creates the CUDA backend at *bs; with --oom-retry, while create says out
 * of memory (the evaluation arena does not fit the cap), halves *bs and tries
 * again, down to 1. *halved_from is the batch asked for when *bs ended lower
 * (0 otherwise); why holds the first refusal's sentence. */
static int create_cuda(const struct train_config *cfg, const struct model_spec *ms,
                       const struct optim_spec *os, const struct backend_opts *bo, int *bs,
                       struct backend **b_out, int *halved_from, char *why, size_t whylen) {
  const int asked = *bs;
  int rc;
  *halved_from = 0;
  why[0] = '\0';
  for (;;) {
    rc = cuda->ops->create(ms, os, *bs, bo, b_out);
    if (rc != -ENOMEM || !cfg->oom_retry || *bs <= 1) break;
    if (!why[0]) snprintf(why, whylen, "%s", backend_why(cuda->ops, rc));
    *bs /= 2;
  }
  if (*bs < asked) *halved_from = asked;
  return rc;
}

/* Loads the plugin and opens the devices' contexts: 0, or -ENODEV / -ENOMEM
 * with the sentence in why. A context that does not fit is not a batch
 * problem, so it is never handed to --oom-retry. */
static int open_cuda(const struct train_config *cfg, char *why, size_t whylen) {
  int rc = cuda ? 0 : cuda_plugin_load(&cuda, why, whylen);
  if (rc) return rc;
  rc = cuda->probe(cfg->gpus);
  if (rc) snprintf(why, whylen, "%s", cuda->last_error());
  return rc;
}

/* How long the members of a trial wait for each other at the rendezvous:
 * they start on different machines, each after its own data load. */
#define DIST_TIMEOUT_MS 120000

/* A trial of several member processes: what the CPU backend cannot do. */
static int refuse_cpu_members(const struct dist *d, const char *why, char *err, size_t errlen) {
  snprintf(err, errlen,
           "WORLD_SIZE=%d: a builtin trial of %d member processes needs the CUDA backend "
           "(NCCL averages the gradients across them); %s. Use \"device\": \"cuda\" or "
           "num_workers 1",
           d->world_size, d->world_size, why);
  return TRAIN_EXIT_USAGE;
}

/* Several members: rank 0 makes the NCCL id, the rendezvous shares it. */
static int join_members(const struct dist *d, unsigned char *id, size_t len,
                        struct backend_opts *bo, char *err, size_t errlen) {
  int rc = d->rank == 0 ? cuda->nccl_id(id, len) : 0;
  if (rc) {
    snprintf(err, errlen, "--device cuda: cannot make the NCCL id: %s", cuda->last_error());
    return exit_for_errno(rc);
  }
  rc = dist_share(d, id, len, DIST_TIMEOUT_MS, err, errlen);
  if (rc) return rc == -ENOMEM ? TRAIN_EXIT_OOM : TRAIN_EXIT_INTERNAL;
  bo->world_size = d->world_size;
  bo->rank = d->rank;
  bo->nccl_id = id;
  log_info("member %d of %d joined the rendezvous at %s:%s", d->rank, d->world_size, d->addr,
           d->port);
  return 0;
}

/* Picks and creates the backend for cfg->device at batch *bs, which
 * --oom-retry may lower (*reduced is then set). */
static int open_backend(const struct train_config *cfg, const struct dist *d,
                        const struct model_spec *ms, const struct optim_spec *os, int *bs,
                        int *reduced, const struct backend_ops **ops_out, struct backend **b_out,
                        char *err, size_t errlen) {
  struct backend_opts bo = {cfg->threads, cfg->gpus, cfg->gpu_mem_limit_mb, 0, 0, NULL};
  unsigned char nccl_id[128];
  int rc;
  if ((cfg->device == DEVICE_CUDA || cfg->device == DEVICE_AUTO) && !cuda_plugin_built()) {
    if (cfg->device == DEVICE_CUDA) {
      snprintf(err, errlen,
               "--device cuda: this ctune-train was built without the CUDA "
               "backend (backends: %s)",
               train_backends_built());
      return TRAIN_EXIT_NO_DEVICE;
    }
    log_info("device: cpu (auto: built without the CUDA backend)");
  } else if (cfg->device == DEVICE_CUDA || cfg->device == DEVICE_AUTO) {
    const int asked = *bs;
    int halved_from = 0;
    char first_why[512];
    rc = open_cuda(cfg, first_why, sizeof(first_why));
    if (rc && cfg->device == DEVICE_CUDA) {
      snprintf(err, errlen, "%s", first_why);
      return exit_for_errno(rc);
    }
    if (rc) {
      log_info("device: cpu (auto: %s)", first_why);
      goto cpu;
    }
    if (d->world_size > 1) {
      rc = join_members(d, nccl_id, sizeof(nccl_id), &bo, err, errlen);
      if (rc) return rc;
    }
    rc = create_cuda(cfg, ms, os, &bo, bs, b_out, &halved_from, first_why, sizeof(first_why));
    if (rc == 0) {
      *ops_out = cuda->ops;
      if (halved_from) {
        *reduced = 1;
        log_warn("--oom-retry: creating the cuda backend at batch_size %d "
                 "ran out of memory, halved it to %d; the backend said: %s",
                 halved_from, *bs, first_why);
      }
      char gpus[64];
      if (cfg->gpus > 0)
        snprintf(gpus, sizeof(gpus), "%d GPU(s)", cfg->gpus);
      else
        snprintf(gpus, sizeof(gpus), "all %d visible GPU(s)", cuda->device_count());
      log_info("device: cuda (%s), %s",
               cfg->device == DEVICE_AUTO ? "auto found a usable device" : "requested", gpus);
      return 0;
    }
    if (cfg->device == DEVICE_CUDA) {
      const char *why = cuda->last_error();
      char retried[96] = "";
      if (halved_from)
        snprintf(retried, sizeof(retried), " (--oom-retry halved batch_size from %d down to %d)",
                 halved_from, *bs);
      if (why[0]) /* the backend's sentence already names --device cuda */
        snprintf(err, errlen, "%s%s", why, retried);
      else
        snprintf(err, errlen, "--device cuda: cannot start the CUDA backend: %s%s", strerror(-rc),
                 retried);
      /* only a missing or unusable device is no_device: a failed cuBLAS or
       * NCCL start on a working GPU is ours to look at, not "no GPU" */
      return exit_for_errno(rc);
    }
    log_info("device: cpu (auto: CUDA backend unavailable: %s)", backend_why(cuda->ops, rc));
    *bs = asked; /* the CPU takes the batch that was asked for */
  }
cpu:
  (void)reduced;
  if (d->world_size > 1) return refuse_cpu_members(d, "no usable CUDA device here", err, errlen);
  rc = backend_cpu_ops.create(ms, os, *bs, &bo, b_out);
  if (rc) {
    snprintf(err, errlen, "cannot create the cpu backend: %s", strerror(-rc));
    return exit_for_errno(rc);
  }
  *ops_out = &backend_cpu_ops;
  return 0;
}

/* Everything one run holds; freed in one place. */
struct run {
  struct dataset train, test;
  int32_t *split;                  /* n: shuffled indices; [0, n_train) train, rest val */
  int32_t *perm;                   /* n_train: this epoch's order */
  struct dataset val;              /* the validation rows of train, as uint8 */
  float *ex, *bx, *params, *state; /* ex: one normalised EVAL_CHUNK */
  uint8_t *by;
  const struct backend_ops *ops;
  struct backend *be;
  /* CUDA fast steps: the training file is set 0 on the device, the
   * validation rows set 1; steps send no data and wait for nothing. The
   * first step of a run is fed from the host (fast_tried 0): it sizes the
   * training buffers for the batch, so the data set goes to the device only
   * where it fits beside them and never pushes --oom-retry's batch down. */
  int fast, fast_tried;
};

static void run_free(struct run *r) {
  if (r->be) r->ops->destroy(r->be);
  data_free(&r->train);
  data_free(&r->test);
  free(r->split);
  free(r->perm);
  data_free(&r->val);
  free(r->ex);
  free(r->bx);
  free(r->params);
  free(r->state);
  free(r->by);
}

/* Evaluates the images of d in chunks of EVAL_CHUNK, normalised into ex,
 * returning mean loss and accuracy. */
static int eval_set(const struct backend_ops *ops, struct backend *be, const struct dataset *d,
                    float *ex, double *loss, double *acc) {
  const int64_t n = d->n, dim = (int64_t)d->c * d->h * d->w;
  double ls = 0.0;
  int64_t ok = 0;
  for (int64_t off = 0; off < n; off += EVAL_CHUNK) {
    int m = (int)(n - off < EVAL_CHUNK ? n - off : EVAL_CHUNK);
    int c = 0;
    data_normalise(d->pix + off * dim, m * dim, ex);
    int rc = ops->evaluate(be, ex, d->y + off, m, &ls, &c);
    if (rc) return rc;
    ok += c;
  }
  *loss = ls / (double)n;
  *acc = (double)ok / (double)n;
  return 0;
}

/* The validation rows as a data set of their own (uint8, as the file). */
static int split_val(const struct dataset *d, const int32_t *idx, int64_t n, struct dataset *out) {
  const int64_t dim = (int64_t)d->c * d->h * d->w;
  *out = *d;
  out->n = n;
  out->pix = malloc((size_t)(n * dim));
  out->y = malloc((size_t)n);
  if (!out->pix || !out->y) {
    data_free(out);
    return -ENOMEM;
  }
  for (int64_t i = 0; i < n; i++) {
    memcpy(out->pix + i * dim, d->pix + (int64_t)idx[i] * dim, (size_t)dim);
    out->y[i] = d->y[idx[i]];
  }
  return 0;
}

/* Uploads the training file (set 0) and the validation rows (set 1) for
 * the CUDA backend's fast steps. A data set that does not fit the device
 * (or its cap) is not an error: the steps are then fed from the host. */
static int fast_setup(struct run *r, char *err, size_t errlen) {
  int rc = cuda->set_data(r->be, 0, r->train.pix, r->train.y, r->train.n);
  if (!rc) rc = cuda->set_data(r->be, 1, r->val.pix, r->val.y, r->val.n);
  if (rc == -ENOMEM) {
    log_warn("cuda: the data set does not fit on the device (%s): steps are "
             "fed from the host",
             backend_why(r->ops, rc));
    return 0;
  }
  if (rc) {
    snprintf(err, errlen, "cannot put the data set on the device: %s", backend_why(r->ops, rc));
    return exit_for_errno(rc);
  }
  /* host-fed steps also sum their losses on the device: drop those (the
   * loop already counted them) so take_loss starts from this point */
  double sum = 0.0;
  int64_t rows = 0;
  int nonfinite = 0;
  rc = cuda->take_loss(r->be, &sum, &rows, &nonfinite);
  if (rc) {
    snprintf(err, errlen, "cannot read the device's loss: %s", backend_why(r->ops, rc));
    return exit_for_errno(rc);
  }
  r->fast = 1;
  log_info("cuda: data set on the device, one graph replay per step, loss "
           "read every %d steps",
           cuda->loss_every);
  return 0;
}

struct loop_state {
  int64_t epoch, pos, step;
  struct splitmix rng;
  double time_total_s, epoch_time_s, epoch_train_time_s;
  double train_loss_sum;
  int64_t train_count;
  double last_loss, last_accuracy;
};

static int save_ckpt(const struct train_config *cfg, struct run *r, const struct model_spec *ms,
                     const struct loop_state *s, int64_t n_train, int64_t n_params, int64_t n_state,
                     char *err, size_t errlen) {
  int64_t step = 0;
  int rc = r->ops->get_state(r->be, r->params, r->state, &step);
  if (rc) {
    snprintf(err, errlen, "cannot read the model state: %s", backend_why(r->ops, rc));
    return exit_for_errno(rc);
  }
  struct ckpt c = {
      .model = *ms,
      .optim_kind = cfg->optimizer,
      .epoch = s->epoch,
      .pos = s->pos,
      .step = step,
      .rng = s->rng.s,
      .time_total_s = s->time_total_s,
      .epoch_time_s = s->epoch_time_s,
      .epoch_train_time_s = s->epoch_train_time_s,
      .train_loss_sum = s->train_loss_sum,
      .train_count = s->train_count,
      .last_loss = s->last_loss,
      .last_accuracy = s->last_accuracy,
      .seed = cfg->seed,
      .train_limit = cfg->train_limit,
      .val_fraction = cfg->val_fraction,
      .dataset = cfg->dataset,
      .n_train = n_train,
      .perm = r->perm,
      .n_params = n_params,
      .n_state = n_state,
      .params = r->params,
      .state = r->state,
  };
  rc = ckpt_save(cfg->checkpoint_dir, &c, err, errlen);
  return rc ? TRAIN_EXIT_CHECKPOINT : 0;
}

/* Loads the checkpoint into the backend and s. Returns 0 (also when there is
 * none: a fresh start), TRAIN_EXIT_CHECKPOINT, or the backend failure's code
 * (out of memory: restoring the optimiser state allocates on the GPU). */
static int resume(const struct train_config *cfg, struct run *r, const struct model_spec *ms,
                  int64_t n_total, int64_t n_train, int64_t n_params, int64_t n_state,
                  struct loop_state *s, char *err, size_t errlen) {
  struct ckpt c;
  char why[512];
  int rc = ckpt_load(cfg->checkpoint_dir, &c, why, sizeof(why));
  if (rc == -ENOENT) {
    log_info("--resume: no checkpoint in %s yet, starting fresh", cfg->checkpoint_dir);
    return 0;
  }
  if (rc) {
    snprintf(err, errlen, "%s", why);
    return TRAIN_EXIT_CHECKPOINT;
  }
  int ret = TRAIN_EXIT_CHECKPOINT;
  if (memcmp(&c.model, ms, sizeof(*ms)) != 0 || c.n_params != n_params) {
    snprintf(err, errlen,
             "%s/%s was written for another model (l1 %d, l2 %d, %d params) "
             "than this run's (l1 %d, l2 %d, %lld params)",
             cfg->checkpoint_dir, CKPT_FILE, c.model.l1, c.model.l2, (int)c.n_params, ms->l1,
             ms->l2, (long long)n_params);
    goto out;
  }
  if (c.optim_kind != cfg->optimizer || c.n_state != n_state) {
    snprintf(err, errlen, "%s/%s was written with another optimizer", cfg->checkpoint_dir,
             CKPT_FILE);
    goto out;
  }
  static const char *const data_names[] = {"fashion-mnist", "mnist", "cifar10"};
  if (c.seed != cfg->seed || c.val_fraction != cfg->val_fraction ||
      c.train_limit != cfg->train_limit || c.dataset != cfg->dataset) {
    const char *cd = c.dataset >= 0 && c.dataset < 3 ? data_names[c.dataset] : "?";
    snprintf(err, errlen,
             "%s/%s was written for another data split (seed %lld, "
             "val_fraction %g, train_limit %lld, dataset %s; this run has "
             "seed %lld, val_fraction %g, train_limit %lld, dataset %s): "
             "resuming would mix validation images into training",
             cfg->checkpoint_dir, CKPT_FILE, (long long)c.seed, c.val_fraction,
             (long long)c.train_limit, cd, (long long)cfg->seed, cfg->val_fraction,
             (long long)cfg->train_limit, data_names[cfg->dataset]);
    goto out;
  }
  if (c.n_train != n_train || c.pos < 0 || c.pos > n_train || c.epoch < 0) {
    snprintf(err, errlen,
             "%s/%s was written for another data split (%lld training images, "
             "this run has %lld)",
             cfg->checkpoint_dir, CKPT_FILE, (long long)c.n_train, (long long)n_train);
    goto out;
  }
  for (int64_t i = 0; i < n_train; i++)
    if (c.perm[i] < 0 || c.perm[i] >= n_total) {
      snprintf(err, errlen, "%s/%s holds an invalid sample order", cfg->checkpoint_dir, CKPT_FILE);
      goto out;
    }
  memcpy(r->perm, c.perm, sizeof(int32_t) * (size_t)n_train);
  rc = r->ops->set_state(r->be, c.params, c.state, c.step);
  if (rc) {
    snprintf(err, errlen, "cannot load the checkpoint into the backend: %s",
             backend_why(r->ops, rc));
    ret = exit_for_errno(rc);
    goto out;
  }
  s->epoch = c.epoch;
  s->pos = c.pos;
  s->step = c.step;
  s->rng.s = c.rng;
  s->time_total_s = c.time_total_s;
  s->epoch_time_s = c.epoch_time_s;
  s->epoch_train_time_s = c.epoch_train_time_s;
  s->train_loss_sum = c.train_loss_sum;
  s->train_count = c.train_count;
  s->last_loss = c.last_loss;
  s->last_accuracy = c.last_accuracy;
  log_info("resumed from %s/%s at epoch %lld, sample %lld", cfg->checkpoint_dir, CKPT_FILE,
           (long long)c.epoch, (long long)c.pos);
  ret = 0;
out:
  ckpt_free(&c);
  return ret;
}

/* Sends the rest of this epoch's order, from sample pos on. */
static int fast_order(struct run *r, int64_t pos, int64_t n_train, char *err, size_t errlen) {
  int rc = cuda->set_order(r->be, 0, r->perm + pos, n_train - pos);
  if (rc) {
    snprintf(err, errlen, "cannot send the sample order: %s", backend_why(r->ops, rc));
    return exit_for_errno(rc);
  }
  return 0;
}

/* Adds the losses summed on the device since the last read to the epoch's
 * sums; a non-finite one is a divergence somewhere in samples [from, pos). */
static int fast_take_loss(const struct train_config *cfg, struct run *r, struct loop_state *s,
                          int64_t from, char *err, size_t errlen) {
  double sum = 0.0;
  int64_t rows = 0;
  int nonfinite = 0;
  int rc = cuda->take_loss(r->be, &sum, &rows, &nonfinite);
  if (rc) {
    snprintf(err, errlen, "training step failed at epoch %lld: %s", (long long)s->epoch + 1,
             backend_why(r->ops, rc));
    return exit_for_errno(rc);
  }
  if (nonfinite || !isfinite(sum)) {
    snprintf(err, errlen,
             "loss is NaN or infinite at epoch %lld, between samples %lld and "
             "%lld (lr %g): training diverged",
             (long long)s->epoch + 1, (long long)from, (long long)s->pos, cfg->lr);
    return TRAIN_EXIT_DIVERGED;
  }
  s->train_loss_sum += sum;
  s->train_count += rows;
  return 0;
}

int train_run(const struct train_config *cfg, volatile sig_atomic_t *stop, FILE *out, char *err,
              size_t errlen) {
  struct run r;
  struct loop_state s;
  memset(&r, 0, sizeof(r));
  memset(&s, 0, sizeof(s));
  int ret = TRAIN_EXIT_INTERNAL, rc;
  const char *dir = cfg->data_dir ? cfg->data_dir : data_default_dir(cfg->dataset);

  struct dist members;
  if (dist_from_env(&members, err, errlen) != 0) {
    ret = TRAIN_EXIT_USAGE;
    goto out;
  }
  if (members.world_size > 1 && cfg->oom_retry) {
    /* one member halving its batch alone would leave the others' shards */
    snprintf(err, errlen,
             "--oom-retry with WORLD_SIZE=%d: the members of a trial must keep "
             "one batch_size; drop --oom-retry or choose a batch that fits",
             members.world_size);
    ret = TRAIN_EXIT_USAGE;
    goto out;
  }
  if (members.world_size > 1 && cfg->device == DEVICE_CPU) { /* before loading data */
    ret = refuse_cpu_members(&members, "this run asks for --device cpu", err, errlen);
    goto out;
  }
  /* Only rank 0 reports and saves checkpoints; the others' results go to
   * stderr (the trial's log), labelled with their rank. */
  const int lead = members.rank == 0;
  if (cfg->checkpoint_dir && ckpt_prepare_dir(cfg->checkpoint_dir, err, errlen) != 0) {
    ret = TRAIN_EXIT_CHECKPOINT;
    goto out;
  }
  rc = data_load(cfg->dataset, dir, 0, cfg->train_limit, &r.train, err, errlen);
  if (rc) {
    ret = rc == -ENOMEM ? TRAIN_EXIT_OOM : TRAIN_EXIT_DATA;
    goto out;
  }
  if (cfg->test) {
    rc = data_load(cfg->dataset, dir, 1, 0, &r.test, err, errlen);
    if (rc) {
      ret = rc == -ENOMEM ? TRAIN_EXIT_OOM : TRAIN_EXIT_DATA;
      goto out;
    }
  }
  const int64_t n_total = r.train.n;
  const int64_t n_train = (int64_t)floor((double)n_total * (1.0 - cfg->val_fraction));
  const int64_t n_val = n_total - n_train;
  if (n_train < 1 || n_val < 1) {
    snprintf(err, errlen,
             "config key \"val_fraction\": %g of %lld images leaves %lld for "
             "training and %lld for validation; both need at least 1",
             cfg->val_fraction, (long long)n_total, (long long)n_train, (long long)n_val);
    ret = TRAIN_EXIT_USAGE;
    goto out;
  }
  const int64_t dim = (int64_t)r.train.c * r.train.h * r.train.w;
  struct model_spec ms = {cfg->model,        r.train.c, r.train.h, r.train.w,
                          r.train.n_classes, cfg->l1,   cfg->l2};
  struct model_layout L;
  if (model_layout_init(&ms, &L) != 0) {
    snprintf(err, errlen, "config key \"model\": %s does not fit %dx%dx%d images",
             model_name[cfg->model], ms.in_c, ms.in_h, ms.in_w);
    ret = TRAIN_EXIT_USAGE;
    goto out;
  }
  struct optim_spec os = {
      cfg->optimizer, (float)cfg->lr, (float)cfg->momentum, (float)cfg->weight_decay, 0.9f,
      0.999f,         1e-8f};
  int bs = cfg->batch_size;
  const int64_t n_state = L.n_params * optim_state_per_param(cfg->optimizer);

  /* the split is a pure function of the seed, so a resumed run rebuilds it */
  r.split = malloc(sizeof(int32_t) * (size_t)n_total);
  r.perm = malloc(sizeof(int32_t) * (size_t)n_train);
  const int64_t n_eval_max = n_val > r.test.n ? n_val : r.test.n;
  const int64_t eval_chunk = n_eval_max < EVAL_CHUNK ? n_eval_max : EVAL_CHUNK;
  r.ex = malloc(sizeof(float) * (size_t)(eval_chunk * dim));
  r.bx = malloc(sizeof(float) * (size_t)((int64_t)bs * dim));
  r.by = malloc((size_t)bs);
  r.params = malloc(sizeof(float) * (size_t)L.n_params);
  r.state = malloc(sizeof(float) * (size_t)n_state);
  if (!r.split || !r.perm || !r.ex || !r.bx || !r.by || !r.params || !r.state) {
    snprintf(err, errlen, "out of memory for %lld images", (long long)n_total);
    ret = TRAIN_EXIT_OOM;
    goto out;
  }
  struct splitmix split_rng, init_rng;
  splitmix_seed(&split_rng, (uint64_t)cfg->seed * 3 + 1);
  splitmix_seed(&init_rng, (uint64_t)cfg->seed * 3 + 2);
  splitmix_seed(&s.rng, (uint64_t)cfg->seed * 3 + 3);
  for (int64_t i = 0; i < n_total; i++) r.split[i] = (int32_t)i;
  splitmix_shuffle(&split_rng, r.split, n_total);
  memcpy(r.perm, r.split, sizeof(int32_t) * (size_t)n_train);
  if (split_val(&r.train, r.split + n_train, n_val, &r.val) != 0) {
    snprintf(err, errlen, "out of memory for %lld images", (long long)n_total);
    ret = TRAIN_EXIT_OOM;
    goto out;
  }

  int bs_reduced = 0;
  ret = open_backend(cfg, &members, &ms, &os, &bs, &bs_reduced, &r.ops, &r.be, err, errlen);
  if (ret) goto out;
  optim_init_params(&L, &init_rng, r.params);
  rc = r.ops->set_state(r.be, r.params, NULL, 0);
  if (rc) {
    snprintf(err, errlen, "cannot initialise the model: %s", backend_why(r.ops, rc));
    ret = exit_for_errno(rc);
    goto out;
  }
  if (cfg->resume) {
    ret = resume(cfg, &r, &ms, n_total, n_train, L.n_params, n_state, &s, err, errlen);
    if (ret) goto out;
  }
  /* fast steps run the whole batch on this process's devices: one member */
  r.fast_tried = !(cuda && r.ops == cuda->ops) || members.world_size > 1;
  log_info("%s on %s: %lld train, %lld val%s, %lld params, batch %d, %s backend",
           model_name[cfg->model], dir, (long long)n_train, (long long)n_val,
           cfg->test ? ", test" : "", (long long)L.n_params, bs, r.ops->name);

  if (s.epoch >= cfg->epochs)
    log_info("checkpoint is at epoch %lld of %d: nothing left to train", (long long)s.epoch,
             cfg->epochs);
  while (s.epoch < cfg->epochs) {
    if (*stop) break;
    double t0 = clock_mono_s();
    if (s.pos == 0) {
      splitmix_shuffle(&s.rng, r.perm, n_train);
      s.epoch_time_s = s.epoch_train_time_s = 0.0;
      s.train_loss_sum = 0.0;
      s.train_count = 0;
    }
    int stopped = 0;
    /* fast steps: the rest of this epoch's order goes to the device once;
     * losses are summed there and read every loss_every steps (pending) */
    int pending = 0;
    int64_t pending_from = s.pos;
    if (r.fast) {
      ret = fast_order(&r, s.pos, n_train, err, errlen);
      if (ret) goto out;
    }
    while (s.pos < n_train) {
      int m = (int)(n_train - s.pos < bs ? n_train - s.pos : bs);
      if (m < bs && cfg->drop_last) {
        s.pos = n_train;
        break;
      }
      float loss = 0.0f;
      if (r.fast) {
        rc = cuda->train_next(r.be, m);
      } else {
        data_gather(&r.train, r.perm + s.pos, m, r.bx, r.by);
        rc = r.ops->train_step(r.be, r.bx, r.by, m, &loss);
      }
      if (rc == -ENOMEM && cfg->oom_retry && bs > 1) {
        bs /= 2;
        bs_reduced = 1;
        log_warn("out of memory at batch_size %d: --oom-retry halves it to %d", bs * 2, bs);
        continue;
      }
      if (rc) {
        if (rc == -ENOMEM)
          snprintf(err, errlen,
                   "out of memory at batch_size %d, epoch %lld (%s backend: "
                   "%s): try a smaller batch_size%s",
                   bs, (long long)s.epoch + 1, r.ops->name, backend_why(r.ops, rc),
                   cfg->oom_retry ? "" : " or --oom-retry");
        else
          snprintf(err, errlen, "training step failed at epoch %lld: %s", (long long)s.epoch + 1,
                   backend_why(r.ops, rc));
        ret = exit_for_errno(rc);
        goto out;
      }
      if (!isfinite(loss)) {
        snprintf(err, errlen,
                 "loss is %s at epoch %lld, sample %lld (lr %g): training "
                 "diverged",
                 isnan(loss) ? "NaN" : "infinite", (long long)s.epoch + 1, (long long)s.pos,
                 cfg->lr);
        ret = TRAIN_EXIT_DIVERGED;
        goto out;
      }
      s.pos += m;
      if (r.fast) {
        /* read at the latest every loss_every steps, at the epoch's end and
         * before a stop (the checkpoint holds the sums) */
        if (++pending < cuda->loss_every && s.pos < n_train && !*stop) continue;
        ret = fast_take_loss(cfg, &r, &s, pending_from, err, errlen);
        if (ret) goto out;
        pending = 0;
        pending_from = s.pos;
      } else {
        s.train_loss_sum += (double)loss * m;
        s.train_count += m;
        if (!r.fast_tried) {
          r.fast_tried = 1;
          ret = fast_setup(&r, err, errlen);
          if (!ret && r.fast) ret = fast_order(&r, s.pos, n_train, err, errlen);
          if (ret) goto out;
          pending_from = s.pos;
        }
      }
      if (*stop) {
        stopped = 1;
        break;
      }
    }
    if (pending) { /* drop_last ended the epoch early */
      ret = fast_take_loss(cfg, &r, &s, pending_from, err, errlen);
      if (ret) goto out;
    }
    double t_train = clock_mono_s() - t0;
    s.epoch_train_time_s += t_train;
    if (stopped) {
      s.epoch_time_s += t_train;
      s.time_total_s += t_train;
      break;
    }
    double vloss, vacc, tloss = 0.0, tacc = 0.0;
    if (r.fast) {
      double ls = 0.0;
      int64_t ok = 0;
      rc = cuda->evaluate_set(r.be, 1, &ls, &ok);
      vloss = ls / (double)n_val;
      vacc = (double)ok / (double)n_val;
    } else {
      rc = eval_set(r.ops, r.be, &r.val, r.ex, &vloss, &vacc);
    }
    if (!rc && cfg->test) rc = eval_set(r.ops, r.be, &r.test, r.ex, &tloss, &tacc);
    if (rc) {
      snprintf(err, errlen, "evaluation failed: %s", backend_why(r.ops, rc));
      ret = exit_for_errno(rc);
      goto out;
    }
    if (!isfinite(vloss)) {
      snprintf(err, errlen,
               "validation loss is not finite after epoch %lld (lr %g): "
               "training diverged",
               (long long)s.epoch + 1, cfg->lr);
      ret = TRAIN_EXIT_DIVERGED;
      goto out;
    }
    double dt = clock_mono_s() - t0;
    s.epoch_time_s += dt;
    s.time_total_s += dt;
    s.epoch++;
    s.pos = 0;
    s.last_loss = vloss;
    s.last_accuracy = vacc;
    struct epoch_report rep = {
        .training_iteration = s.epoch,
        .loss = vloss,
        .accuracy = vacc,
        .train_loss = s.train_count ? s.train_loss_sum / s.train_count : 0.0,
        .time_this_iter_s = s.epoch_time_s,
        .time_total_s = s.time_total_s,
        .samples_per_s =
            s.epoch_train_time_s > 0 ? (double)s.train_count / s.epoch_train_time_s : 0.0,
        .has_test = cfg->test,
        .test_accuracy = tacc,
        .batch_size_reduced = bs_reduced,
        .batch_size = bs,
    };
    if (strcmp(r.ops->name, "cpu") != 0 && r.ops->peak_mem_mb(r.be, &rep.gpu_mem_mb) == 0)
      rep.has_gpu_mem = 1;
    char line[1024];
    int n = report_format(&rep, line, sizeof(line));
    if (n > 0 && lead) {
      fwrite(line, 1, (size_t)n, out);
      fflush(out);
    } else if (n > 0) {
      fprintf(stderr, "rank %d result: %.*s", members.rank, n, line);
      fflush(stderr);
    }
    report_notify(&rep, &L, r.ops, r.be, r.params, r.state); /* --tensorboard-dir */
    if (cfg->checkpoint_dir && lead) {
      ret = save_ckpt(cfg, &r, &ms, &s, n_train, L.n_params, n_state, err, errlen);
      if (ret) goto out;
    }
  }
  if (*stop) {
    if (cfg->checkpoint_dir && lead) {
      ret = save_ckpt(cfg, &r, &ms, &s, n_train, L.n_params, n_state, err, errlen);
      if (ret) goto out;
      log_info("stopped by signal: checkpoint saved at epoch %lld, sample %lld", (long long)s.epoch,
               (long long)s.pos);
    } else {
      log_info("stopped by signal at epoch %lld (no --checkpoint-dir, nothing "
               "saved)",
               (long long)s.epoch);
    }
  }
  ret = TRAIN_EXIT_OK;
out:
  run_free(&r);
  return ret;
}
