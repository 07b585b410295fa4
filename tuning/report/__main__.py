import sys

from tuning.report.comparison import main

sys.exit(main())
