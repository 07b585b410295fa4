"""FCNet's tables with two objectives (tuning.compare.mobench), single fidelity: the validation MSE against
the network's parameter count, both minimised; the table is the trainer,
"tuning.mobench:mo_fcnet_<dataset>"."""

from search_spaces.fcnet import SPACE as _TABLE

SPACE = _TABLE.replace(trainer="tuning.mobench:mo_fcnet_naval_propulsion",
                       objectives={"loss": "min", "model_size": "min"})
