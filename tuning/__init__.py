"""tuning: hyperparameter search on Ray Tune, for your trainer or the built-in CIFAR-10 one.

    import tuning
    from tuning import Space, LogUniform, Choice

    space = Space(params={"lr": LogUniform(1e-4, 1e-1), "batch_size": Choice([32, 64])},
                  metric="accuracy", mode="max", max_epochs=10)
    result = tuning.search(train, space, strategy="bohb", num_samples=32)
    result.trials, result.best.config, result.report
    state = tuning.load_checkpoint(result.best.checkpoint)   # the best trial's last on_epoch state

search() and resume() import torch and Ray when called, not when tuning is imported.
"""

from tuning.cli import TuningError
from tuning.spaces import Choice, IntLogUniform, IntUniform, LogUniform, Space, SpaceError, Uniform

__version__ = "0.1.0"
__all__ = ["search", "resume", "SearchResult", "Best", "Space", "LogUniform", "Uniform", "IntUniform",
           "IntLogUniform", "Choice", "TuningError", "SpaceError", "load_checkpoint"]


def __getattr__(name: str):
    # The API and its result type on first use: tuning.api is light, tuning.session imports torch.
    if name in ("search", "resume"):
        from tuning import api

        return getattr(api, name)
    if name == "load_checkpoint":  # trialstate imports psutil, not torch: torch only for a torch.save'd state
        from tuning.trial import trialstate

        return trialstate.load_checkpoint
    if name in ("SearchResult", "Best"):
        from tuning import searchresult

        return getattr(searchresult, name)
    raise AttributeError(f"module 'tuning' has no attribute {name!r}")
