import sys

from tuning.bench.measure import main

sys.exit(main())
