"""`python -m keras_transformer.export ...` is `kt-export ...`."""

import sys

from keras_transformer.export.export_command import main

sys.exit(main())
