"""`python -m keras_transformer.demo ...` is `kt-demo ...`."""

import sys

from keras_transformer.demo.demo import main

sys.exit(main())
