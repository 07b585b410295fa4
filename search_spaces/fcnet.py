"""HPOLib's FCNet tables (tuning.compare.realbench): every configuration of a grid of nine parameters of
a two-layer network (activations, units, dropout, learning rate and schedule, batch size) trained
on a UCI regression dataset. The dataset is the trainer, "fcnet_<dataset>"; loss = the validation
MSE (mean over the table's seeds). Single fidelity, as search_spaces/hpobench_mlp."""

from search_spaces.hpobench_mlp import SPACE as _TABLE
from tuning.compare.realbench import table_space
from tuning.spaces import Choice

# The table's own values: strings for activations and the schedule, numbers for the rest.
PARAMS = {name: Choice(values) for name, values in table_space("hpolib").items()}

SPACE = _TABLE.replace(params=PARAMS, trainer="fcnet_naval_propulsion")
