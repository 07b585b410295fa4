"""A trainer for tests/test_mo_strategies.py: two objectives that trade off, and a memory figure
that grows with every epoch (as a process's peak memory does)."""


def growing(*, x, y, epochs, state=None, on_epoch):
    """tests/user_trainers.py's `tradeoff` (a larger x lowers loss and raises latency_ms; y only
    makes both worse), with peak_mem_gb = 1 + 2 x epochs: it only grows, and passes 4 in the
    epoch after 1.5 / x, so with 4 epochs a trial of x above 0.375 crosses it before the last."""
    for e in range(state["epoch"] if state else 0, epochs):
        on_epoch({"loss": (1 - x) ** 2 + 0.2 * y + 0.1 / (e + 1), "latency_ms": 1 + 10 * x + 2 * y,
                  "peak_mem_gb": 1 + 2 * x * (e + 1)}, {"epoch": e + 1})
