"""`python -m keras_transformer.export ...` is `kt-export ...`."""

import sys

from keras_transformer.export.saved_model import main

sys.exit(main())
