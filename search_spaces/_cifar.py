"""The CIFAR-10 parameters every cifar_* space searches: one declaration, so a comparison of
strategies compares strategies, not spaces."""

from tuning.spaces import Choice, LogUniform

PARAMS = {
    # AdamW: ~1e-3 is the usual optimum for small convnets; a decade either side brackets it
    # without spending trials on learning rates that stall or diverge. Grid: 4 log-spaced points.
    "lr": LogUniform(1e-4, 1e-2, grid=4),
    # Batches of 2-16 make an epoch 3,000-22,000 tiny steps, each paying Python and kernel-launch
    # overhead. 64-512 keeps the device busy while an epoch of 45k images still has 88+ steps.
    "batch_size": Choice([64, 128, 256, 512]),
}

# Not searched: standard AdamW decoupled weight decay, and a width that trains on 2 CPUs.
FIXED = {"weight_decay": 5e-4, "width": 16,
         # bf16 autocast on CUDA (fp32 weights and checkpoints), fp32 on CPU, where bf16 runs several
         # times slower (make gpu-check: cpu_bf16_vs_fp32_speed); "fp32" turns bf16 off everywhere (or tuning.run --precision fp32).
         "precision": "auto"}

# What a trial whose loss turns NaN reports instead: far above chance-level cross-entropy
# (ln 10 = 2.3), so it ranks below any trial that trained, yet stays finite for ASHA and BOHB.
DIVERGED = 10.0
