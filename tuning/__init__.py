"""tuning: hyperparameter search for PyTorch CIFAR-10 trainers on Ray Tune."""

__version__ = "0.1.0"
