"""Reads a TensorBoard log folder with TensorBoard's OWN reader and prints it
as one JSON document. Run by the venv's python (scripts/install-deps --test makes
~/.cache/ctune/tensorboard-2.21.0), called by test_export_tensorboard.py and
tests/trainer/test_tensorboard.py, which run on the system python.

Usage: tb_read.py LOGDIR [--hparams-api]

Output: {"runs": {RUN: {"files": N, "records": N, "file_version": [...],
  "scalars": {TAG: [[step, value, wall_time], ...]},
  "histograms": {TAG: [{"step", "min", "max", "num", "sum", "sum_squares",
                        "bucket_limit", "bucket"}]},
  "hparams_experiment": {...} | null, "session_start": {...} | null,
  "session_end": {...} | null}}}
With --hparams-api also "hparams_api": what the HParams plugin's backend
serves its tab (hparam and metric names; per session group its hparams,
metric values [step, value] and statuses).
Every record of every file is also read by the record reader that checks
both CRCs and raises on a mismatch (the accumulator would silently stop at
a bad record).
"""
import json
import os
import sys

from google.protobuf import json_format
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
from tensorboard.plugins.hparams import metadata as hp_metadata


def strict_records(path):
    """Every record, CRCs checked; raises DataLossError on corruption."""
    reader = pywrap_tensorflow.PyRecordReader_New(path.encode(), 0, b"", None)
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        out.append(reader.record())


def read_run(run_dir):
    files = sorted(f for f in os.listdir(run_dir) if "tfevents" in f)
    records = 0
    versions = []
    for f in files:
        recs = strict_records(os.path.join(run_dir, f))
        records += len(recs)
        for r in recs:
            ev = event_pb2.Event.FromString(r)
            if ev.WhichOneof("what") == "file_version":
                versions.append(ev.file_version)
        if recs:
            first = event_pb2.Event.FromString(recs[0])
            if first.WhichOneof("what") != "file_version":
                raise SystemExit(f"{f}: the first event is not file_version")
    acc = event_accumulator.EventAccumulator(
        run_dir,
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0,
                       event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    run = {"files": len(files), "records": records, "file_version": versions,
           "scalars": {}, "histograms": {}, "hparams_experiment": None,
           "session_start": None, "session_end": None}
    for tag in tags["scalars"]:
        run["scalars"][tag] = [[e.step, e.value, e.wall_time] for e in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        run["histograms"][tag] = [
            {"step": e.step, "min": e.histogram_value.min, "max": e.histogram_value.max,
             "num": e.histogram_value.num, "sum": e.histogram_value.sum,
             "sum_squares": e.histogram_value.sum_squares,
             "bucket_limit": list(e.histogram_value.bucket_limit),
             "bucket": list(e.histogram_value.bucket)}
            for e in acc.Histograms(tag)]
    try:
        content = acc.PluginTagToContent(hp_metadata.PLUGIN_NAME)
    except KeyError:  # no hparams summaries in this run
        content = {}
    if hp_metadata.EXPERIMENT_TAG in content:
        run["hparams_experiment"] = json_format.MessageToDict(
            hp_metadata.parse_experiment_plugin_data(content[hp_metadata.EXPERIMENT_TAG]),
            preserving_proto_field_name=True)
    if hp_metadata.SESSION_START_INFO_TAG in content:
        start = hp_metadata.parse_session_start_info_plugin_data(
            content[hp_metadata.SESSION_START_INFO_TAG])
        d = json_format.MessageToDict(start, preserving_proto_field_name=True)
        # the values as Python values, types kept (number, string, bool)
        d["values"] = {k: json_format.MessageToDict(v) for k, v in start.hparams.items()}
        run["session_start"] = d
    if hp_metadata.SESSION_END_INFO_TAG in content:
        end = hp_metadata.parse_session_end_info_plugin_data(
            content[hp_metadata.SESSION_END_INFO_TAG])
        run["session_end"] = {"status": end.status, "end_time_secs": end.end_time_secs}
    return run


def hparams_api(logdir):
    """What TensorBoard's HParams tab gets: the plugin's own backend
    (get_experiment, list_session_groups) over the folder, in process."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import (api_pb2, backend_context, get_experiment,
                                             list_session_groups)
    mux = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={"hparams": 0, "scalars": 0})
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    tb = base_plugin.TBContext(logdir=logdir, multiplexer=mux,
                               data_provider=data_provider.MultiplexerDataProvider(mux, logdir))
    ctx, rc = backend_context.Context(tb), context.RequestContext()
    exp = get_experiment.Handler(rc, ctx, "", api_pb2.GetExperimentRequest()).run()
    req = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=10000,
                                           allowed_statuses=[0, 1, 2, 3])
    for h in exp.hparam_infos:
        req.col_params.add(hparam=h.name)
    for m in exp.metric_infos:
        req.col_params.add(metric=m.name)
    groups = list_session_groups.Handler(rc, ctx, "", req).run()
    out = {}
    for g in groups.session_groups:
        out[g.name] = {
            "hparams": {k: json_format.MessageToDict(v) for k, v in g.hparams.items()},
            "metrics": {m.name.tag: [m.training_step, m.value] for m in g.metric_values},
            "status": [s.status for s in g.sessions]}
    return {"hparams": [h.name for h in exp.hparam_infos],
            "metrics": [m.name.tag for m in exp.metric_infos], "session_groups": out}


def main():
    logdir = sys.argv[1]
    runs = {}
    for root, _dirs, files in os.walk(logdir):
        if any("tfevents" in f for f in files):
            runs[os.path.relpath(root, logdir)] = read_run(root)
    doc = {"runs": runs}
    if "--hparams-api" in sys.argv[2:]:
        doc["hparams_api"] = hparams_api(logdir)
    json.dump(doc, sys.stdout)


if __name__ == "__main__":
    main()
