import sys

from tuning.compare.runner import main

sys.exit(main())
