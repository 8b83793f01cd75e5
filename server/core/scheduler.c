/* sched: one interface over every scheduler. fifo and asha (stopping) are
 * here; the issue 13 schedulers add their `case`s to the dispatch below. */
#include "scheduler.h"
#include "asha_promo.h"
#include "hyperband.h"
#include "median.h"
#include "pbt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sched {
	struct sched_params p;
	enum spec_mode mode;
	struct asha *asha; /* asha (stopping variant); NULL for fifo */
	struct hyperband *hb; /* hyperband */
	struct pbt *pbt;      /* pbt */
	struct median *med;   /* median_stopping */
	struct apromo *ap;    /* asha with "promotion": true (asha_promo.c) */
};

void sched_outcome_clear(struct sched_outcome *o)
{
	if (!o)
		return;
	cJSON_Delete(o->record);
	cJSON_Delete(o->new_config);
	free(o->ended);
	memset(o, 0, sizeof *o);
	o->asha.milestone_index = -1;
}

void sched_choice_clear(struct sched_choice *c)
{
	if (!c)
		return;
	cJSON_Delete(c->record);
	memset(c, 0, sizeof *c);
}

int sched_create(const struct sched_params *params, enum spec_mode mode,
		 uint64_t seed, struct sched **out)
{
	struct sched *s;
	int rc;
	*out = NULL;
	if (!params || (params->type != SPEC_SCHED_FIFO && params->type != SPEC_SCHED_ASHA &&
			params->type != SPEC_SCHED_HYPERBAND && params->type != SPEC_SCHED_PBT &&
			params->type != SPEC_SCHED_MEDIAN))
		return -EINVAL;
	s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->p = *params;
	s->mode = mode;
	if (params->type == SPEC_SCHED_HYPERBAND) {
		rc = hb_create(params->max_t, params->reduction_factor, mode, params->num_trials,
			       &s->hb);
		if (rc) {
			free(s);
			return rc;
		}
	}
	/* pbt keeps its own copy of the mutations; the spec's may go. */
	s->p.pbt.mutations = NULL;
	if (params->type == SPEC_SCHED_PBT || params->type == SPEC_SCHED_MEDIAN) {
		rc = params->type == SPEC_SCHED_PBT ? pbt_create(&params->pbt, mode, seed, &s->pbt)
						    : median_create(&params->median, mode, &s->med);
		if (rc) {
			free(s);
			return rc;
		}
	}
	if (params->type == SPEC_SCHED_ASHA && params->promotion) {
		rc = apromo_create(params, mode, seed, &s->ap);
		if (rc) {
			free(s);
			return rc;
		}
	} else if (params->type == SPEC_SCHED_ASHA) {
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
	hb_free(s->hb);
	pbt_free(s->pbt);
	median_free(s->med);
	apromo_free(s->ap);
	free(s);
}

size_t sched_mem_bytes(const struct sched *s)
{
	if (!s)
		return 0;
	return sizeof *s + asha_mem_bytes(s->asha) + hb_mem_bytes(s->hb) +
	       pbt_mem_bytes(s->pbt) + median_mem_bytes(s->med) + apromo_mem_bytes(s->ap);
}

enum spec_sched_type sched_type(const struct sched *s)
{
	return s->p.type;
}

int sched_bracket_for(const struct sched *s, int64_t idx)
{
	if (s->hb)
		return hb_bracket_of(s->hb, idx) < 0 ? 0 : hb_bracket_of(s->hb, idx);
	if (s->ap)
		return apromo_bracket_for(s->ap, idx);
	return s->asha ? asha_bracket_for(s->asha, idx) : 0;
}

int sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx, const char *config_json)
{
	(void)config_json;
	if (idx < 0)
		return -EINVAL;
	if (s->hb)
		return hb_add_trial(s->hb, trial_id, idx);
	if (s->ap)
		return apromo_add_trial(s->ap, trial_id, apromo_bracket_for(s->ap, idx));
	if (s->pbt) {
		/* PBT explores from a donor's config: it keeps each trial's. */
		cJSON *cfg = config_json ? cJSON_Parse(config_json) : NULL;
		int rc;
		if (config_json && !cfg)
			return -EINVAL;
		rc = pbt_add_trial(s->pbt, trial_id, idx, cfg);
		cJSON_Delete(cfg);
		return rc;
	}
	if (s->med)
		return 0; /* a trial joins median stopping with its first result */
	if (!s->asha)
		return 0;
	return asha_add_trial(s->asha, trial_id, asha_bracket_for(s->asha, idx));
}

static void outcome_reset(struct sched_outcome *out)
{
	memset(out, 0, sizeof *out);
	out->asha.milestone_index = -1;
	out->asha.milestone = NAN;
	out->asha.value = NAN;
	out->asha.cutoff = NAN;
}

static void fifo_outcome(const struct sched *s, double t, struct sched_outcome *out)
{
	outcome_reset(out);
	if (s->p.has_max_t && t >= s->p.max_t) {
		out->action = SCHED_STOP;
		out->asha.decision = ASHA_STOP;
		out->asha.reason = ASHA_REASON_MAX_T;
		snprintf(out->reason, sizeof out->reason, "reached max_t %g (%s %g)", s->p.max_t,
			 s->p.time_attr, t);
	}
}

/* How many trials have a value recorded at (bracket, index): the "of N" of a
 * stop reason. Read from the state JSON: stops are rare, this is not hot. */
static int asha_recorded_at(const struct asha *a, int bracket, int index)
{
	cJSON *st = NULL;
	int n = -1;
	if (asha_state_json(a, &st))
		return -1;
	const cJSON *br = cJSON_GetArrayItem(st, bracket);
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(br, "milestones");
	const cJSON *rec = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ms, index), "recorded");
	if (cJSON_IsNumber(rec))
		n = rec->valueint;
	cJSON_Delete(st);
	return n;
}

/* asha's outcome as a sched_outcome with its reason sentence. The values in
 * the sentence are in the metric's own sign (asha keeps them flipped for
 * min). */
static void asha_outcome_to_sched(const struct sched *s, double t, struct sched_outcome *out)
{
	const struct asha_outcome *a = &out->asha;
	double sign = s->mode == SPEC_MODE_MIN ? -1 : 1;
	if (a->decision != ASHA_STOP) {
		out->action = SCHED_CONTINUE;
		return;
	}
	out->action = SCHED_STOP;
	out->stopped_early = a->stopped_early;
	switch (a->reason) {
	case ASHA_REASON_MAX_T:
		snprintf(out->reason, sizeof out->reason, "reached max_t %g (%s %g)", s->p.max_t,
			 s->p.time_attr, t);
		break;
	case ASHA_REASON_NONFINITE:
		snprintf(out->reason, sizeof out->reason,
			 "stopped at t=%g: the metric is not a finite number at rung %g", t,
			 a->milestone);
		break;
	case ASHA_REASON_CUTOFF: {
		int n = asha_recorded_at(s->asha, a->bracket, a->milestone_index);
		snprintf(out->reason, sizeof out->reason,
			 "stopped at t=%g: %.6g worse than cutoff %.6g of %d trials at rung %g", t,
			 sign * a->value, sign * a->cutoff, n, a->milestone);
		break;
	}
	default:
		snprintf(out->reason, sizeof out->reason, "stopped at t=%g", t);
	}
}

/* hyperband's outcome as a sched_outcome. Paused trials a halving stopped
 * (hb.stopped) are out->ended: state_decide ends them TERMINATED with their
 * reason in the decision's transaction. */
static int hb_to_sched(int rc, struct hb_outcome *hb, struct sched_outcome *out)
{
	outcome_reset(out);
	if (rc == 0 && hb->nstopped) {
		out->ended = calloc(hb->nstopped, sizeof *out->ended);
		if (!out->ended)
			rc = -ENOMEM;
		for (size_t i = 0; out->ended && i < hb->nstopped; i++) {
			out->ended[i].trial_id = hb->stopped[i].trial_id;
			snprintf(out->ended[i].reason, sizeof out->ended[i].reason, "%s",
				 hb->stopped[i].reason);
		}
		out->nended = out->ended ? hb->nstopped : 0;
	}
	if (rc == 0) {
		out->action = hb->action == HB_PAUSE  ? SCHED_PAUSE
			      : hb->action == HB_STOP ? SCHED_STOP
						      : SCHED_CONTINUE;
		out->stopped_early = hb->stopped_early;
		snprintf(out->reason, sizeof out->reason, "%s", hb->reason);
		out->record = hb->record;
		hb->record = NULL;
	}
	hb_outcome_clear(hb);
	return rc;
}

/* asha with promotion: pause at a rung, stop at max_t or on a non-finite
 * value at a rung (it could never be promoted). */
static int ap_on_result(const struct sched *s, int64_t trial_id, double t, const double *value,
			struct sched_outcome *out)
{
	struct apromo_outcome ao;
	int rc;
	outcome_reset(out);
	if (!value) {
		/* Ray: a result without the metric is not the scheduler's
		 * business (it ranks at no rung); max_t still ends the trial. */
		fifo_outcome(s, t, out);
		return 0;
	}
	rc = apromo_on_result(s->ap, trial_id, t, *value, &ao);
	if (rc)
		return rc;
	out->record = ao.record;
	switch (ao.action) {
	case APROMO_PAUSE:
		out->action = SCHED_PAUSE;
		snprintf(out->reason, sizeof out->reason,
			 "paused at rung %d (%s %g): rank %lld of %lld there", ao.rung,
			 s->p.time_attr, ao.rung_t, (long long)ao.rank, (long long)ao.n);
		break;
	case APROMO_STOP:
		out->action = SCHED_STOP;
		if (ao.why == APROMO_MAX_T) {
			snprintf(out->reason, sizeof out->reason, "reached max_t %g (%s %g)",
				 s->p.max_t, s->p.time_attr, t);
		} else {
			out->stopped_early = 1;
			snprintf(out->reason, sizeof out->reason,
				 "stopped at t=%g: the metric is not a finite number at rung %d", t,
				 ao.rung);
		}
		break;
	default:
		break;
	}
	return 0;
}

int sched_on_result(struct sched *s, int64_t trial_id, double t,
		    const double *value, struct sched_outcome *out)
{
	int rc;
	if (isnan(t))
		return -EINVAL;
	if (s->hb) {
		struct hb_outcome hb;
		/* A result without the metric ranks below every value. */
		rc = hb_on_result(s->hb, trial_id, t, value ? *value : NAN, &hb);
		return hb_to_sched(rc, &hb, out);
	}
	if (s->ap)
		return ap_on_result(s, trial_id, t, value, out);
	if (s->pbt) {
		struct pbt_outcome po;
		outcome_reset(out);
		if (!value)
			return 0; /* Ray: a result without the metric continues */
		rc = pbt_on_result(s->pbt, trial_id, t, *value, &po);
		if (rc)
			return rc;
		if (po.exploit) {
			out->action = SCHED_EXPLOIT;
			out->donor_trial_id = po.donor_trial_id;
			out->new_config = po.new_config;
			po.new_config = NULL;
			snprintf(out->reason, sizeof out->reason, "%s", po.reason);
		}
		out->record = po.record;
		po.record = NULL;
		pbt_outcome_clear(&po);
		return 0;
	}
	if (s->med) {
		struct median_outcome mo;
		outcome_reset(out);
		if (!value)
			return 0;
		rc = median_on_result(s->med, trial_id, t, *value, &mo);
		if (rc)
			return rc;
		out->action = mo.action == MEDIAN_STOP ? SCHED_STOP
			      : mo.action == MEDIAN_PAUSE ? SCHED_PAUSE : SCHED_CONTINUE;
		out->stopped_early = mo.action == MEDIAN_STOP;
		snprintf(out->reason, sizeof out->reason, "%s", mo.reason);
		out->record = mo.record;
		mo.record = NULL;
		median_outcome_clear(&mo);
		return 0;
	}
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
	outcome_reset(out);
	rc = asha_on_result(s->asha, trial_id, t, *value, &out->asha);
	if (rc)
		return rc;
	asha_outcome_to_sched(s, t, out);
	return 0;
}

int sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
		       const double *last_value, struct sched_outcome *out)
{
	if (s->hb) {
		struct hb_outcome hb;
		struct sched_outcome ignored;
		int rc = hb_on_trial_end(s->hb, trial_id, &hb);
		rc = hb_to_sched(rc, &hb, out ? out : &ignored);
		if (!out)
			sched_outcome_clear(&ignored);
		else
			out->action = SCHED_CONTINUE;
		return rc;
	}
	if (s->ap) {
		int rc;
		(void)has_last;
		(void)t;
		(void)last_value;
		if (out)
			outcome_reset(out);
		rc = apromo_on_trial_end(s->ap, trial_id);
		return rc == -ENOENT ? 0 : rc; /* never joined: nothing to leave */
	}
	if (s->pbt || s->med) {
		int rc = 0;
		if (out)
			outcome_reset(out);
		if (s->pbt) {
			rc = pbt_on_trial_end(s->pbt, trial_id);
			return rc == -ENOENT ? 0 : rc; /* never joined: nothing to leave */
		}
		if (has_last && last_value) {
			struct median_outcome mo;
			rc = median_on_trial_end(s->med, trial_id, 1, t, *last_value, &mo);
			if (!rc && out) {
				out->record = mo.record;
				mo.record = NULL;
			}
			median_outcome_clear(&mo);
		}
		return rc;
	}
	if (out)
		fifo_outcome(s, -INFINITY, out);
	if (!s->asha)
		return 0;
	if (has_last && last_value && out) {
		int rc = asha_on_trial_end(s->asha, trial_id, 1, t, *last_value, &out->asha);
		/* The decision of the last pass is not the server's business. */
		out->action = SCHED_CONTINUE;
		return rc;
	}
	return asha_on_trial_end(s->asha, trial_id, 0, 0, 0, NULL);
}

int sched_choose(struct sched *s, int can_new, sched_resumable_fn resumable, void *ctx,
		 struct sched_choice *out)
{
	memset(out, 0, sizeof *out);
	if (s->hb) {
		struct hb_choice c;
		int rc = hb_choose(s->hb, can_new, resumable, ctx, &c);
		if (rc)
			return rc;
		out->kind = c.kind == HB_RESUME ? SCHED_CHOOSE_RESUME
			    : c.kind == HB_NEW  ? SCHED_CHOOSE_NEW
						: SCHED_CHOOSE_WAIT;
		out->trial_id = c.trial_id;
		snprintf(out->reason, sizeof out->reason, "%s", c.reason);
		out->record = c.record;
		return 0;
	}
	if (s->ap) {
		struct apromo_choice c;
		int rc = apromo_choose(s->ap, resumable, ctx, &c);
		if (rc)
			return rc;
		if (c.found) {
			out->kind = SCHED_CHOOSE_RESUME;
			out->trial_id = c.trial_id;
			out->record = c.record;
			if (s->ap && apromo_num_brackets(s->ap) > 1)
				snprintf(out->reason, sizeof out->reason,
					 "promoted from rung %d of bracket %d (top %lld of %lld at "
					 "%s %g), runs to %g",
					 c.rung, c.bracket, (long long)c.top, (long long)c.n,
					 s->p.time_attr, c.rung_t, c.next_t);
			else
				snprintf(out->reason, sizeof out->reason,
					 "promoted from rung %d (top %lld of %lld at %s %g), runs "
					 "to %g",
					 c.rung, (long long)c.top, (long long)c.n, s->p.time_attr,
					 c.rung_t, c.next_t);
			return 0;
		}
		/* Nothing to promote: a new trial while the plan allows one (the
		 * paper draws a new configuration), else wait for running ones. */
		out->kind = can_new ? SCHED_CHOOSE_NEW : SCHED_CHOOSE_WAIT;
		return 0;
	}
	if (s->med && !can_new) {
		/* hard_stop false: Ray's FIFO runs PENDING trials before PAUSED
		 * ones, so a paused trial resumes once no new one can start. */
		int64_t id;
		cJSON *rec = NULL;
		int rc = median_choose_resume(s->med, resumable, ctx, &id, &rec);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			out->kind = SCHED_CHOOSE_RESUME;
			out->trial_id = id;
			out->record = rec;
			snprintf(out->reason, sizeof out->reason,
				 "resumed: no new trial left to start (median stopping, hard_stop false)");
			return 0;
		}
	}
	out->kind = can_new ? SCHED_CHOOSE_NEW : SCHED_CHOOSE_WAIT;
	return 0;
}

int sched_restore(struct sched *s, int64_t trial_id, const cJSON *record)
{
	if (s->hb)
		return hb_restore(s->hb, trial_id, record);
	if (s->pbt)
		return pbt_restore(s->pbt, trial_id, record);
	if (s->med)
		return median_restore(s->med, trial_id, record);
	if (s->ap)
		return apromo_restore(s->ap, trial_id, record);
	/* fifo and asha-stopping never return a record. */
	return -EINVAL;
}

int sched_raise_max_t(struct sched *s, double max_t)
{
	if (s->asha || s->hb || s->pbt || s->med || s->ap)
		return -EOPNOTSUPP;
	if (!(max_t >= s->p.max_t))
		return -EINVAL;
	s->p.max_t = max_t;
	return 0;
}

int sched_exploit_refused(struct sched *s, int64_t trial_id, struct sched_outcome *out)
{
	int rc;
	if (!s->pbt || !out || out->action != SCHED_EXPLOIT)
		return 0;
	rc = pbt_exploit_refused(s->pbt, trial_id, out->record);
	return rc == -ENOENT ? 0 : rc;
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
	if (s->hb) {
		/* {"type", "time_attr", "max_t", "reduction_factor"} + hb_state_json */
		cJSON *hs = NULL;
		cJSON_Delete(o);
		if (hb_state_json(s->hb, &hs))
			return -ENOMEM;
		if (!cJSON_AddStringToObject(hs, "type", "hyperband") ||
		    !cJSON_AddStringToObject(hs, "time_attr", s->p.time_attr) ||
		    !cJSON_AddNumberToObject(hs, "max_t", s->p.max_t) ||
		    !cJSON_AddNumberToObject(hs, "reduction_factor", s->p.reduction_factor)) {
			cJSON_Delete(hs);
			return -ENOMEM;
		}
		*out = hs;
		return 0;
	}
	if (s->pbt || s->med) {
		/* {"type", "time_attr"} + pbt_state_json / median_state_json */
		cJSON *st = NULL;
		cJSON_Delete(o);
		if (s->pbt ? pbt_state_json(s->pbt, &st) : median_state_json(s->med, &st))
			return -ENOMEM;
		if (!cJSON_AddStringToObject(st, "type", s->pbt ? "pbt" : "median_stopping") ||
		    !cJSON_AddStringToObject(st, "time_attr", s->p.time_attr)) {
			cJSON_Delete(st);
			return -ENOMEM;
		}
		*out = st;
		return 0;
	}
	if (s->ap) {
		ok = cJSON_AddStringToObject(o, "type", "asha") &&
		     cJSON_AddTrueToObject(o, "promotion") &&
		     cJSON_AddStringToObject(o, "time_attr", s->p.time_attr) &&
		     cJSON_AddNumberToObject(o, "max_t", s->p.max_t) &&
		     cJSON_AddNumberToObject(o, "grace_period", s->p.grace_period) &&
		     cJSON_AddNumberToObject(o, "reduction_factor", s->p.reduction_factor) &&
		     apromo_state_json(s->ap, &br) == 0;
		if (ok && !cJSON_AddItemToObject(o, "brackets", br)) {
			cJSON_Delete(br);
			ok = 0;
		}
		if (!ok) {
			cJSON_Delete(o);
			return -ENOMEM;
		}
		*out = o;
		return 0;
	}
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
