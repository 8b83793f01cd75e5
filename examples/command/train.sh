#!/bin/sh
# A command trainable for ctune: ctune-worker runs it with the trial's
# hyperparameters put into argv ({lr}, {width}); every stdout line that is a
# JSON object holding "training_iteration" is a result, any other output is
# the trial's log. It checkpoints to $CTUNE_CHECKPOINT_DIR/checkpoint.bin and
# resumes from it when CTUNE_RESUME=1, and exits 0 on SIGTERM (a stop).
# usage: train.sh LR WIDTH [ITERATIONS] [SECONDS_PER_ITERATION]
set -eu
lr=$1
width=$2
iters=${3:-10}
pause=${4:-0.2}
ckpt="${CTUNE_CHECKPOINT_DIR:-.}/checkpoint.bin"
i=0
if [ "${CTUNE_RESUME:-0}" = 1 ] && [ -f "$ckpt" ]; then
  i=$(cat "$ckpt")
  echo "resuming after iteration $i"
fi
trap 'echo "stopped at iteration $i" >&2; exit 0' TERM
echo "trial ${CTUNE_TRIAL_ID:-?}: lr=$lr width=$width on pid $$"
while [ "$i" -lt "$iters" ]; do
  sleep "$pause"
  i=$((i + 1))
  # A made-up loss surface: best near lr = 10^-2.5, wider is better.
  loss=$(awk -v lr="$lr" -v w="$width" -v i="$i" 'BEGIN {
    l = log(lr) / log(10) + 2.5; printf "%.6f", (l * l + 1) / (i * (1 + w / 64.0)) }')
  echo "{\"training_iteration\": $i, \"loss\": $loss}"
  echo "$i" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
done
