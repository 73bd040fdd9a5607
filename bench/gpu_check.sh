#!/usr/bin/env bash
# What keras-transformer does on your GPU, in under 8 minutes on one GPU (docs/gpus.md): the
# devices TensorFlow sees and the precision --mixed_precision auto picks; kt-train of
# transformer_base at the paper's 25,000 tokens an update for 2 minutes (target tokens a second
# and model FLOPs utilization against the card's peak, the formula printed); a beam-4 decode of
# the 492 dev sentences; a SavedModel export, reloaded in a fresh process that has only
# TensorFlow and tensorflow-text.
#
#   bash bench/gpu_check.sh [WORK_DIR]         # on a GPU machine, after pip install -e .
#   bash bench/gpu_check.sh --tiny [WORK_DIR]  # the same steps with transformer_tiny (CPU check)
#
# Send the whole output (it starts with the devices) with a report.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python}
hparams=transformer_base minutes=2 log_every=20
if [[ "${1:-}" == "--tiny" ]]; then
    hparams=transformer_tiny minutes=0.3 log_every=5 batch=(--batch_tokens 2000)
    shift
else  # 25,000 tokens an update, 3,125 a GPU a micro-batch (what a P100 held; docs/gpus.md)
    read -r -a batch <<< "$("$python" -m bench.gpu_check paper_batch)"
fi
work=${1:-$(mktemp -d)}
mkdir -p "$work"
data=(--data bible_en_es --source_lang en --target_lang es)

echo "== devices"
"$python" -m bench.gpu_check devices

echo "== vocabulary (8,000 SentencePiece pieces of the bundled Bible corpus)"
kt-vocab "${data[@]}" --vocab_size 8000 --output "$work/vocab.model"

echo "== kt-train $hparams ${batch[*]}, $minutes minutes"
kt-train --model_dir "$work/run" "${data[@]}" --vocab "$work/vocab.model" --hparams "$hparams" \
    "${batch[@]}" --mixed_precision auto --max_minutes "$minutes" \
    --train_steps 100000 --log_every "$log_every" --eval_sentences 0 --eval_every 1000000 \
    --checkpoint_every_steps 0 | tee "$work/train.log"
"$python" -m bench.gpu_check utilization --model_dir "$work/run" --log "$work/train.log"

echo "== beam-4 decode of the dev split (492 sentences)"
kt-translate --model_dir "$work/run" "${data[@]}" --split dev --beam_size 4 \
    --output "$work/dev.hyp" --overwrite 2>&1 | tail -n 3

echo "== SavedModel export, reloaded in a fresh process"
kt-export --model_dir "$work/run" --output "$work/export" --version 1
"$python" - "$work/export/1" <<'EOF'
import sys
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

translate = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
start = time.perf_counter()
output = translate(inputs=tf.constant(["In the beginning was the Word.", "Jesus wept."]))
print([text.decode() for text in output["translations"].numpy()],
      f"{time.perf_counter() - start:.1f} s (the first call traces)")
EOF
echo "== done: $work"
