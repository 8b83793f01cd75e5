/* routes: the one routing table of ctune-server — every path, method and who
 * may call it. Handlers live in api_*.c. */
#include "api.h"

enum {
  H_HEALTHZ,
  H_METRICS,
  H_EXP_CREATE,
  H_EXP_LIST,
  H_EXP_GET,
  H_EXP_TRIALS,
  H_EXP_RESULTS,
  H_EXP_BEST,
  H_EXP_PARETO,
  H_EXP_CANCEL,
  H_TRIAL_GET,
  H_TRIAL_RESULTS,
  H_TRIAL_REPORT,
  H_TRIAL_COMPLETE,
  H_TRIAL_FAIL,
  H_TRIAL_RELEASE,
  H_CKPT_PUT,
  H_CKPT_GET,
  H_LOG_PUT,
  H_LOG_GET,
  H_WORKER_REGISTER,
  H_WORKER_LIST,
  H_HEARTBEAT,
  H_LEASE,
  H_EVENTS,
  H_WORKER_DEREGISTER,
  H_WORKER_REVOKE,
  H_WORKER_RELEASE_QUARANTINE,
  H_VENDOR,
  H_STATIC,
  H_EXP_PAUSE,
  H_EXP_RESUME,
  H_EXP_PATCH,
  H_EXP_DELETE,
  H_TRIAL_STOP, /* a user's control */
  H_TRIAL_RENDEZVOUS,
  H_COUNT
};

int api_healthz(struct server *, const struct api_req *, struct api_resp *);
int api_metrics(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_create(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_list(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_get(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_trials(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_results(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_best(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_pareto(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_cancel(struct server *, const struct api_req *, struct api_resp *);
int api_trial_get(struct server *, const struct api_req *, struct api_resp *);
int api_trial_results(struct server *, const struct api_req *, struct api_resp *);
int api_trial_report(struct server *, const struct api_req *, struct api_resp *);
int api_trial_complete(struct server *, const struct api_req *, struct api_resp *);
int api_trial_fail(struct server *, const struct api_req *, struct api_resp *);
int api_trial_release(struct server *, const struct api_req *, struct api_resp *);
int api_checkpoint_put(struct server *, const struct api_req *, struct api_resp *);
int api_checkpoint_get(struct server *, const struct api_req *, struct api_resp *);
int api_log_put(struct server *, const struct api_req *, struct api_resp *);
int api_log_get(struct server *, const struct api_req *, struct api_resp *);
int api_worker_register(struct server *, const struct api_req *, struct api_resp *);
int api_worker_list(struct server *, const struct api_req *, struct api_resp *);
int api_worker_heartbeat(struct server *, const struct api_req *, struct api_resp *);
int api_worker_lease(struct server *, const struct api_req *, struct api_resp *);
int sse_events(struct server *, const struct api_req *, struct api_resp *);
int api_worker_deregister(struct server *, const struct api_req *, struct api_resp *);
int api_worker_revoke_all(struct server *, const struct api_req *, struct api_resp *);
int api_worker_release_quarantine(struct server *, const struct api_req *, struct api_resp *);
int api_static_vendor(struct server *, const struct api_req *, struct api_resp *);
int api_static_web(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_pause(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_resume(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_patch(struct server *, const struct api_req *, struct api_resp *);
int api_experiment_delete(struct server *, const struct api_req *, struct api_resp *);
int api_trial_stop(struct server *, const struct api_req *, struct api_resp *);
int api_trial_rendezvous(struct server *, const struct api_req *, struct api_resp *);

const struct route api_routes[] = {
    {RM_GET, "/healthz", RA_PUBLIC, H_HEALTHZ},
    {RM_GET, "/metrics", RA_ADMIN, H_METRICS},
    {RM_POST, "/api/v1/experiments", RA_ADMIN, H_EXP_CREATE},
    {RM_GET, "/api/v1/experiments", RA_ADMIN, H_EXP_LIST},
    {RM_GET, "/api/v1/experiments/{id}", RA_ADMIN, H_EXP_GET},
    {RM_GET, "/api/v1/experiments/{id}/trials", RA_ADMIN, H_EXP_TRIALS},
    {RM_GET, "/api/v1/experiments/{id}/results", RA_ADMIN, H_EXP_RESULTS},
    {RM_GET, "/api/v1/experiments/{id}/best", RA_ADMIN, H_EXP_BEST},
    {RM_GET, "/api/v1/experiments/{id}/pareto", RA_ADMIN, H_EXP_PARETO},
    {RM_POST, "/api/v1/experiments/{id}/cancel", RA_ADMIN, H_EXP_CANCEL},
    /* docs/protocol.md#experiment-control: a user's changes, admin only */
    {RM_POST, "/api/v1/experiments/{id}/pause", RA_ADMIN, H_EXP_PAUSE},
    {RM_POST, "/api/v1/experiments/{id}/resume", RA_ADMIN, H_EXP_RESUME},
    {RM_PATCH, "/api/v1/experiments/{id}", RA_ADMIN, H_EXP_PATCH},
    {RM_DELETE, "/api/v1/experiments/{id}", RA_ADMIN, H_EXP_DELETE},
    {RM_POST, "/api/v1/trials/{id}/stop", RA_ADMIN, H_TRIAL_STOP},
    {RM_GET, "/api/v1/trials/{id}", RA_ADMIN, H_TRIAL_GET},
    {RM_GET, "/api/v1/trials/{id}/results", RA_ADMIN, H_TRIAL_RESULTS},
    {RM_POST, "/api/v1/trials/{id}/results", RA_WORKER, H_TRIAL_REPORT},
    {RM_POST, "/api/v1/trials/{id}/complete", RA_WORKER, H_TRIAL_COMPLETE},
    {RM_POST, "/api/v1/trials/{id}/fail", RA_WORKER, H_TRIAL_FAIL},
    {RM_POST, "/api/v1/trials/{id}/release", RA_WORKER, H_TRIAL_RELEASE},
    {RM_POST, "/api/v1/trials/{id}/rendezvous", RA_WORKER, H_TRIAL_RENDEZVOUS},
    {RM_PUT, "/api/v1/trials/{id}/checkpoint", RA_WORKER, H_CKPT_PUT},
    {RM_GET, "/api/v1/trials/{id}/checkpoint", RA_WORKER, H_CKPT_GET},
    {RM_PUT, "/api/v1/trials/{id}/logs", RA_WORKER, H_LOG_PUT},
    {RM_GET, "/api/v1/trials/{id}/logs", RA_ADMIN, H_LOG_GET},
    {RM_POST, "/api/v1/workers", RA_WORKER, H_WORKER_REGISTER},
    {RM_GET, "/api/v1/workers", RA_ADMIN, H_WORKER_LIST},
    {RM_POST, "/api/v1/workers/{id}/heartbeat", RA_WORKER, H_HEARTBEAT},
    {RM_POST, "/api/v1/workers/{id}/lease", RA_WORKER, H_LEASE},
    {RM_POST, "/api/v1/workers/{id}/deregister", RA_WORKER, H_WORKER_DEREGISTER},
    {RM_POST, "/api/v1/workers/revoke", RA_ADMIN, H_WORKER_REVOKE},
    {RM_POST, "/api/v1/workers/{id}/release-quarantine", RA_ADMIN, H_WORKER_RELEASE_QUARANTINE},
    {RM_GET, "/api/v1/events", RA_ADMIN, H_EVENTS},
    /* Static files carry no data: the dashboard page loads without a token
     * and then calls the API with one. */
    {RM_GET, "/vendor/*", RA_PUBLIC, H_VENDOR},
    {RM_GET, "/*", RA_PUBLIC, H_STATIC},
};
const size_t api_nroutes = sizeof api_routes / sizeof api_routes[0];

const api_handler api_handlers[H_COUNT] = {
    [H_HEALTHZ] = api_healthz,
    [H_METRICS] = api_metrics,
    [H_EXP_CREATE] = api_experiment_create,
    [H_EXP_LIST] = api_experiment_list,
    [H_EXP_GET] = api_experiment_get,
    [H_EXP_TRIALS] = api_experiment_trials,
    [H_EXP_RESULTS] = api_experiment_results,
    [H_EXP_BEST] = api_experiment_best,
    [H_EXP_PARETO] = api_experiment_pareto,
    [H_EXP_CANCEL] = api_experiment_cancel,
    [H_TRIAL_GET] = api_trial_get,
    [H_TRIAL_RESULTS] = api_trial_results,
    [H_TRIAL_REPORT] = api_trial_report,
    [H_TRIAL_COMPLETE] = api_trial_complete,
    [H_TRIAL_FAIL] = api_trial_fail,
    [H_TRIAL_RELEASE] = api_trial_release,
    [H_CKPT_PUT] = api_checkpoint_put,
    [H_CKPT_GET] = api_checkpoint_get,
    [H_LOG_PUT] = api_log_put,
    [H_LOG_GET] = api_log_get,
    [H_WORKER_REGISTER] = api_worker_register,
    [H_WORKER_LIST] = api_worker_list,
    [H_HEARTBEAT] = api_worker_heartbeat,
    [H_LEASE] = api_worker_lease,
    [H_EVENTS] = sse_events,
    [H_WORKER_DEREGISTER] = api_worker_deregister,
    [H_WORKER_REVOKE] = api_worker_revoke_all,
    [H_WORKER_RELEASE_QUARANTINE] = api_worker_release_quarantine,
    [H_VENDOR] = api_static_vendor,
    [H_STATIC] = api_static_web,
    [H_EXP_PAUSE] = api_experiment_pause,
    [H_EXP_RESUME] = api_experiment_resume,
    [H_EXP_PATCH] = api_experiment_patch,
    [H_EXP_DELETE] = api_experiment_delete,
    [H_TRIAL_STOP] = api_trial_stop,
    [H_TRIAL_RENDEZVOUS] = api_trial_rendezvous,
};
