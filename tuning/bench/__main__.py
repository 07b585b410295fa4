import sys

from tuning.bench.cli import main

sys.exit(main())
