"""The tf.data options of every dataset this package makes: autotuning off.

With autotuning on, a dataset's iterator starts a thread that tunes its buffers and sleeps between
rounds for a period that doubles, and the iterator's end waits for that thread. While the test
suite ran, dropping a finished run's iterator (at exit, or whenever Python collected it, e.g. an
evaluation's dev pairs read at a run's start and collected inside the next command) waited 5-37 s
for it, and a process holding one exited 33-38 s late (py-spy of the waiting thread:
`IteratorResource::~IteratorResource` -> `UnboundedThreadPool` -> `WaitForNotification`);
not reproduced on demand (bench/iterator_teardown.py). Without it, AUTOTUNE means a map per core
and a prefetch buffer that grows while the model waits: 14.5-15.8 batches/s of the bundled corpus
at 25k tokens against 13.7-14.8 with the thread (2 cores).
"""

import tensorflow as tf


def untuned_options():
    """A fresh `tf.data.Options` with autotuning off, for a pipeline to add its own to."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def without_autotuning(dataset):
    """`dataset` with autotuning off (module doc); what it reads inherits the option."""
    return dataset.with_options(untuned_options())
