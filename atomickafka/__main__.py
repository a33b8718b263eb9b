"""Allow ``python -m atomickafka``."""

import sys

from atomickafka.cli import main

sys.exit(main())
