"""``python -m budgettune.engines.embedded``: run the simulated engine (flags mirror vllm serve)."""

import sys

from budgettune.engines.embedded.cli import main

sys.exit(main())
