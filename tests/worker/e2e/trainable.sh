#!/bin/sh
# Test trainable for ctune-worker's e2e tests.
# usage: trainable.sh ITERATIONS SECONDS_PER_ITERATION [EXIT_CODE [SECONDS_RESUMED]]
# Prints its pid, what the worker put in its environment and the CPUs it
# may run on (its affinity, which awk inherits), one result per
# iteration with a wall-clock "ts", checkpoints the iteration count, resumes
# from it (then at SECONDS_RESUMED per iteration when given: a test that
# needs the trial running until some event need not wait as long for the
# rest), records when SIGTERM arrived, and exits EXIT_CODE at the end.
iters=$1
pause=$2
code=${3:-0}
ckpt="$CTUNE_CHECKPOINT_DIR/checkpoint.bin"
i=0
if [ "$CTUNE_RESUME" = 1 ] && [ -f "$ckpt" ]; then
  i=$(cat "$ckpt")
  echo "resumed at $i"
  pause=${4:-$pause}
fi
echo "pid=$$ trial=$CTUNE_TRIAL_ID omp=$OMP_NUM_THREADS blas=$OPENBLAS_NUM_THREADS cuda=[$CUDA_VISIBLE_DEVICES] gpumem=${CTUNE_GPU_MEM_LIMIT_MB:-none} resume=$CTUNE_RESUME cpus=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)"
echo "$$" > "$CTUNE_CHECKPOINT_DIR/pid"
# Like ctune-train: on SIGTERM, checkpoint the last reported iteration, exit 0.
trap 'echo "$i" > "$ckpt"; echo "got TERM at $(date +%s.%N)" >&2; exit 0' TERM
while [ "$i" -lt "$iters" ]; do
  sleep "$pause"
  n=$((i + 1))
  echo "{\"training_iteration\": $n, \"loss\": $(awk "BEGIN { print 1 / $n }"), \"ts\": $(date +%s.%N)}"
  i=$n
  echo "$i" > "$ckpt.tmp"
  mv "$ckpt.tmp" "$ckpt"
done
if [ "$code" != 0 ]; then
  echo "boom: simulated failure" >&2
  exit "$code"
fi
