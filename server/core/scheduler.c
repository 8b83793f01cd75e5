/* sched: one interface over the fifo and asha schedulers. */
#include "scheduler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sched {
	struct sched_params p;
	struct asha *asha; /* NULL for fifo */
};

int sched_create(const struct sched_params *params, enum spec_mode mode,
		 uint64_t seed, struct sched **out)
{
	struct sched *s;
	int rc;
	*out = NULL;
	if (!params || (params->type != SPEC_SCHED_FIFO && params->type != SPEC_SCHED_ASHA))
		return -EINVAL;
	s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->p = *params;
	if (params->type == SPEC_SCHED_ASHA) {
		rc = asha_create(params, mode, seed, &s->asha);
		if (rc) {
			free(s);
			return rc;
		}
	}
	*out = s;
	return 0;
}

void sched_free(struct sched *s)
{
	if (!s)
		return;
	asha_free(s->asha);
	free(s);
}

enum spec_sched_type sched_type(const struct sched *s)
{
	return s->p.type;
}

int sched_bracket_for(const struct sched *s, int64_t trial_index)
{
	return s->asha ? asha_bracket_for(s->asha, trial_index) : 0;
}

int sched_add_trial(struct sched *s, int64_t trial_id, int bracket)
{
	if (!s->asha)
		return bracket == 0 ? 0 : -EINVAL;
	return asha_add_trial(s->asha, trial_id, bracket);
}

static void fifo_outcome(const struct sched *s, double t, struct asha_outcome *out)
{
	memset(out, 0, sizeof *out);
	out->milestone_index = -1;
	out->milestone = NAN;
	out->value = NAN;
	out->cutoff = NAN;
	if (s->p.has_max_t && t >= s->p.max_t) {
		out->decision = ASHA_STOP;
		out->reason = ASHA_REASON_MAX_T;
	}
}

int sched_on_result(struct sched *s, int64_t trial_id, double t,
		    const double *value, struct asha_outcome *out)
{
	if (isnan(t))
		return -EINVAL;
	if (!s->asha) {
		fifo_outcome(s, t, out);
		return 0;
	}
	if (!value) {
		/* Ray: a result without the metric is not ASHA's business. */
		if (!asha_has_trial(s->asha, trial_id))
			return -ENOENT;
		fifo_outcome(s, -INFINITY, out);
		return 0;
	}
	return asha_on_result(s->asha, trial_id, t, *value, out);
}

int sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
		       const double *last_value, struct asha_outcome *out)
{
	if (!s->asha) {
		if (out)
			fifo_outcome(s, -INFINITY, out);
		return 0;
	}
	if (has_last && last_value)
		return asha_on_trial_end(s->asha, trial_id, 1, t, *last_value, out);
	if (out)
		fifo_outcome(s, -INFINITY, out);
	return asha_on_trial_end(s->asha, trial_id, 0, 0, 0, NULL);
}

int sched_restore_record(struct sched *s, int64_t trial_id, int bracket,
			 double milestone, double value, int stopped_early)
{
	if (!s->asha)
		return -EINVAL;
	return asha_restore_record(s->asha, trial_id, bracket, milestone, value, stopped_early);
}

int sched_state_json(const struct sched *s, cJSON **out)
{
	cJSON *o = cJSON_CreateObject(), *br = NULL;
	int ok;
	*out = NULL;
	if (!o)
		return -ENOMEM;
	ok = cJSON_AddStringToObject(o, "type", s->asha ? "asha" : "fifo") &&
	     cJSON_AddStringToObject(o, "time_attr", s->p.time_attr) &&
	     (s->p.has_max_t ? cJSON_AddNumberToObject(o, "max_t", s->p.max_t) != NULL
			     : cJSON_AddNullToObject(o, "max_t") != NULL);
	if (ok && s->asha) {
		ok = cJSON_AddNumberToObject(o, "grace_period", s->p.grace_period) &&
		     cJSON_AddNumberToObject(o, "reduction_factor", s->p.reduction_factor) &&
		     asha_state_json(s->asha, &br) == 0;
		if (ok && !cJSON_AddItemToObject(o, "brackets", br)) {
			cJSON_Delete(br);
			ok = 0;
		}
	}
	if (!ok) {
		cJSON_Delete(o);
		return -ENOMEM;
	}
	*out = o;
	return 0;
}
