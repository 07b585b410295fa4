import sys

from tuning import cli
from tuning.report.comparison import main

cli.quiet_libraries(ray=False)  # fANOVA's Optuna: its study's lines say nothing here
sys.exit(main())
