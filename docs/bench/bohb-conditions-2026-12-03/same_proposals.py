"""Feed VectorisedBOHB the same results on the three spaces without conditions (counting ones, paired
choices, misleading first epoch) and print a digest of its 150 proposals on each: the same digests
from two checkouts mean the same proposals. Run from a checkout: PYTHONPATH=$PWD python THIS_FILE."""
import hashlib
import importlib
import json

import numpy as np

from tuning import spaces  # tuning.benchmarks when written (2026-12-03)
from tuning.compare import benchmarks
from tuning.backend import bohb
for name in ("counting_ones", "paired_choices", "misleading_first_epoch"):
    m = importlib.import_module(f"search_spaces.{name}")
    sp = [v for v in vars(m).values() if isinstance(v, spaces.Space)][0]
    cs = spaces.to_configspace(sp, seed=0)
    np.random.seed(0)
    model = bohb.VectorisedBOHB(cs)
    fn = benchmarks.BENCHMARKS[name].fn
    out = []
    for i in range(150):
        c, info = model.get_config(27)
        out.append((json.dumps({k: spaces.plain(v) for k, v in c.items()}, sort_keys=True), info["model_based_pick"]))
        bohb.observe(model, dict(c), fn({k: spaces.plain(v) for k, v in c.items()}, 27, 27, 0), 27)
    print(name, sum(b for _, b in out), hashlib.sha1(json.dumps(out).encode()).hexdigest()[:12])
