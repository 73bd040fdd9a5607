"""Where a beam search's time goes: TensorFlow's host trace of one decode, summed by op type and
by the part of the step an op belongs to.

Runs `kt.beam_decode` (beam 4, alpha 0.6) on the base model shape with random weights, every
hypothesis running to --new_tokens (eos_id=-1, as in bench/decode_speed.py), once to trace and
compile, then --repeats times under `tf.profiler`, in float32 and with bfloat16 weights. TensorFlow
runs the graph's ops on two inter-op threads and splits a big op (a matmul) over the intra-op
threads; "op time" is the time each op took from start to end on its inter-op thread, summed over
both threads, so it exceeds the wall time when ops overlap, and its shares are shares of that sum.
The profiler slows a decode of many small ops (bfloat16's) noticeably, so each decode is also
timed without it first. Ops that TensorFlow's cost model finds cheap run inline and may go
untraced: the op time is that of the ops the trace holds, nearly all of it in the big ones.

    python -m bench.op_profile
"""

import argparse
import collections
import pathlib
import re
import statistics
import tempfile
import time

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

import keras_transformer as kt
from bench.common import append_results, markdown_table

# The part of a decode step an op belongs to: the innermost of these layer names among its name
# scope's segments (with Keras' "_1" suffixes and layer numbers removed).
ENCODER = "encoder (once a batch)"
PARTS = (
    ("feed_forward", "feed-forward"),
    ("encoder_decoder_attention", "encoder-decoder attention"),
    ("self_attention", "self-attention"),
    ("self_attention_block", "residual + layer norm"),
    ("encoder_decoder_attention_block", "residual + layer norm"),
    ("feed_forward_block", "residual + layer norm"),
    ("embedding", "embedding lookup + positions"),
    ("decoder_positions", "embedding lookup + positions"),
    # What a decoder layer does outside its sub-layers: project the new position to keys and
    # values (compute_key_value, called directly) and append them to a growing cache.
    ("decoder_layer", "self-attention: new keys/values, cache append"),
)
SEARCH = "search (log-softmax, top-k, reorder, bookkeeping)"
OUTPUT_PROJECTION = "output projection (logits)"


def op_events(logdir):
    """[(op name, op type, seconds)] of every TensorFlow op the host trace in `logdir` holds."""
    events = []
    for path in pathlib.Path(logdir).rglob("*.xplane.pb"):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    op_name, colon, op_type = name.rpartition(":")
                    # Op events are "scope/op:OpType"; the tracer's own events have spaces or
                    # "::" in their names.
                    if colon and op_name and " " not in name and "::" not in name:
                        events.append((op_name, op_type, event.duration_ps * 1e-12))
    return events


def part_of(op_name, op_type):
    """The decode part (ENCODER, PARTS, OUTPUT_PROJECTION or SEARCH) an op belongs to."""
    segments = [re.sub(r"(_\d+)+$", "", segment) for segment in op_name.split("/")]
    if "encoder_layer" in segments:
        return ENCODER
    for segment in reversed(segments):
        for name, part in PARTS:
            if segment == name:
                if name == "embedding" and "MatMul" in op_type:
                    return OUTPUT_PROJECTION
                return part
    return SEARCH


def profile(decode, repeats):
    """(wall seconds per run [repeats], {op type: op seconds per run}, {part: op seconds per
    run}) for `decode()`, already traced."""
    walls = []
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(repeats):
            start = time.perf_counter()
            decode()
            walls.append(time.perf_counter() - start)
        tf.profiler.experimental.stop()
        events = op_events(logdir)
    by_type, by_part = collections.Counter(), collections.Counter()
    for op_name, op_type, seconds in events:
        by_type[op_type] += seconds / repeats
        by_part[part_of(op_name, op_type)] += seconds / repeats
    return walls, by_type, by_part


def rows_of(counter, total, top):
    return [[name, f"{seconds:.2f}", f"{seconds / total:.0%}"]
            for name, seconds in counter.most_common(top)]


def main():
    parser = argparse.ArgumentParser(prog="python -m bench.op_profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams", default="transformer_base")
    parser.add_argument("--vocab_size", type=int, default=32000)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="op types listed")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()

    source_ids = tf.random.stateless_uniform(
        [args.batch_size, args.source_length], [1, 2], 2, args.vocab_size, tf.int32)
    sections = []
    for dtype in args.dtypes.split(","):
        model = kt.build_model(args.hparams, args.vocab_size, dtype=dtype)

        def decode(model=model):
            ids, _ = kt.beam_decode(model, source_ids, extra_length=args.new_tokens
                                    - args.source_length, eos_id=-1)
            return ids.numpy()

        decode()
        unprofiled = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            decode()
            unprofiled.append(time.perf_counter() - start)
        walls, by_type, by_part = profile(decode, args.repeats)
        total = sum(by_type.values())
        print(f"{dtype}: {statistics.median(unprofiled):.2f} s a decode "
              f"({statistics.median(walls):.2f} s profiled), op time {total:.2f} s",
              flush=True)
        sections.append(
            f"**{dtype} weights**: {statistics.median(unprofiled):.2f} s a decode (median of "
            f"{args.repeats}; {statistics.median(walls):.2f} s under the profiler, "
            f"{min(walls):.2f}-{max(walls):.2f}), op time {total:.2f} s.\n\n"
            + markdown_table(["part of the decode", "op s", "share"],
                             rows_of(by_part, total, len(by_part)))
            + "\n\n" + markdown_table(["op type", "op s", "share"],
                                      rows_of(by_type, total, args.top)))
    append_results(
        "Where beam search's time goes (op profile)",
        f"{args.hparams} shape, {args.vocab_size}-id vocabulary, random weights; beam 4, "
        f"{args.batch_size} sources of {args.source_length} tokens, {args.new_tokens} tokens "
        f"every hypothesis (eos_id=-1); op seconds per decode (summed over TensorFlow's two "
        f"inter-op threads, so above the wall time where ops overlap).\n\n"
        + "\n\n".join(sections))


if __name__ == "__main__":
    main()
