"""``python -m nncert``: the same as the ``nncert`` command."""

import sys

from nncert.cli import main

sys.exit(main())
