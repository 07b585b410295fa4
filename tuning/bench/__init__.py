"""Measurement: what the service costs and whether its data is right.

``python -m tuning.bench`` (cli: the sections, harness: what they share, memory, sched), the GPU
check (gpucheck and its steps, ``make gpu-check``) and the synthetic data's calibration. Nothing on
a run's path imports from here."""
