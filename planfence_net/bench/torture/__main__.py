"""`python -m planfence_net.bench.torture`: the reliability suite (see `suite.main`)."""

from __future__ import annotations

import sys

from .suite import main

sys.exit(main())
