"""`python -m keras_transformer.trainer ...` is `kt-train ...`."""

import sys

from keras_transformer.trainer.task import main

sys.exit(main())
