"""Issue 7's targets against the committed benchmark runs: `harness scorecard`, also without
`pip install -e .` (the code is harness/scorecard.py).

    python scripts/scorecard.py [--op OP] [--results DIR] [--json]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.scorecard import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
