"""`python -m export ...` is `kt-export ...`."""

import sys

from export.saved_model import main

sys.exit(main())
