"""``python -m tuning.bench.calibration``: is the synthetic data as hard as the cifar_* space needs?

``table DIR`` reads a run's trials.csv and epochs.csv (``python -m tuning.run --space cifar_grid
--data synthetic --results-dir DIR``, or ``proxy`` below) and writes DIR/calibration.md: each
configuration's validation accuracy by epoch, and the verdict on each target of
docs/synthetic-data.md: the best in the 70-90 % band, the worst 10+ points below it, the best
learning rate inside the range, batch size mattering, learning curves crossing.

``proxy DIR`` trains the same grid without Ray (smaller subsets, fewer epochs, optionally on a
GPU) and writes the same two tables, so the generator can be tuned in minutes. A proxy is only a
proxy: more data and more epochs raise every accuracy.

``probe`` fits a linear model to the pixels of freshly generated images: it should stay near
chance on held-out images, or the data's hyperparameters would hardly matter. ``examples PNG``
draws some images of each class.

Exit code: 0 when every check passes, 1 when one fails, 2 on bad input.
"""

from __future__ import annotations

import logging
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from tuning import cli
from tuning.bench.harness import write_rows

log = logging.getLogger(__name__)

PARAMS = ["lr", "batch_size"]
BAND = (0.70, 0.90)  # the best configuration's final accuracy
MIN_GAP = 0.10  # best minus worst
MIN_BATCH_EFFECT = 0.02  # spread over batch sizes at the best learning rate
# A flip counts when both orders are clear by this much: on 5,000 validation images the difference
# of two accuracies has a standard error of up to 1 point, so two configurations still at chance
# swap places by 1 point all the time.
CROSS_MARGIN = 0.02
CHANCE = 0.10  # what a diverged trial (accuracy NaN) counts as
CURVE_COLUMNS = ("epoch", "loss", "accuracy", "train_loss", "diverged", "train_time_s")  # kept by proxy


def curves(epochs: pd.DataFrame, params: list[str] = PARAMS) -> pd.DataFrame:
    """Mean validation accuracy per configuration (rows) and epoch (columns). A diverged trial
    counts as chance from the epoch it diverged on; a trial that stopped keeps its last value."""
    df = epochs.assign(accuracy=epochs["accuracy"].fillna(CHANCE))
    table = df.groupby(params + ["epoch"])["accuracy"].mean().unstack("epoch")
    return table.ffill(axis=1).sort_index()


def crossings(early: pd.Series, final: pd.Series, margin: float = CROSS_MARGIN) -> list[tuple]:
    """Pairs of configurations (a, b) with a clearly ahead of b early and b clearly ahead at the end."""
    out = []
    for a, b in combinations(early.index, 2):
        if early[a] < early[b]:
            a, b = b, a
        if early[a] - early[b] >= margin and final[b] - final[a] >= margin:
            out.append((a, b))
    return out


def verdicts(epochs: pd.DataFrame, early_epoch: int = 2, params: list[str] = PARAMS) -> dict:
    """The checks of docs/synthetic-data.md on one grid's learning curves."""
    from scipy.stats import kendalltau

    acc = curves(epochs, params)
    if early_epoch not in acc.columns or len(acc) < 2:
        raise ValueError(f"need at least 2 configurations with an epoch {early_epoch}; "
                         f"found {len(acc)} configurations and epochs {list(acc.columns)}")
    early, final = acc[early_epoch], acc[acc.columns[-1]]
    best, worst = final.idxmax(), final.idxmin()
    by = dict(zip(params, best))
    lrs = sorted(acc.index.get_level_values("lr").unique())
    at_lr = final.xs(by["lr"], level="lr")
    flips = crossings(early, final)
    tau = kendalltau(early.to_numpy(), final.to_numpy()).statistic
    checks = [
        ("best in band", BAND[0] <= final[best] <= BAND[1],
         f"best {_cfg(best, params)}: {final[best]:.1%} (target {BAND[0]:.0%}-{BAND[1]:.0%})"),
        ("worst far below", final[best] - final[worst] >= MIN_GAP,
         f"worst {_cfg(worst, params)}: {final[worst]:.1%}, {100 * (final[best] - final[worst]):.1f} points "
         f"below the best (target >= {100 * MIN_GAP:.0f})"),
        ("best lr interior", len(lrs) > 2 and lrs[0] < by["lr"] < lrs[-1],
         f"best lr {by['lr']:.3g} among {', '.join(f'{v:.3g}' for v in lrs)}"),
        ("batch size matters", at_lr.max() - at_lr.min() >= MIN_BATCH_EFFECT,
         f"at lr {by['lr']:.3g}: " + ", ".join(f"batch {b} {v:.1%}" for b, v in at_lr.items())
         + f" (spread {100 * (at_lr.max() - at_lr.min()):.1f} points, "
           f"target >= {100 * MIN_BATCH_EFFECT:.0f})"),
        ("curves cross", bool(flips),
         f"{len(flips)} of {len(acc) * (len(acc) - 1) // 2} pairs swap order between epoch {early_epoch} "
         f"and {acc.columns[-1]} by >= {100 * CROSS_MARGIN:.0f} points each way; Kendall tau "
         f"early/final {tau:.2f}"),
    ]
    return {"curves": acc, "early_epoch": early_epoch, "crossings": flips, "kendall_tau": float(tau),
            "checks": checks, "passed": all(ok for _, ok, _ in checks)}


def _cfg(key: tuple, params: list[str]) -> str:
    return ", ".join(f"{p}={v:.3g}" if isinstance(v, float) else f"{p}={v}" for p, v in zip(params, key))


def render(v: dict, params: list[str] = PARAMS) -> str:
    """Markdown: the accuracy table (a few epochs, the early one and the last) and the checks."""
    acc = v["curves"]
    last = acc.columns[-1]
    shown = sorted({1, v["early_epoch"], *[e for e in (4, 8) if e < last], last} & set(acc.columns))
    rank_early = acc[v["early_epoch"]].rank(ascending=False, method="min").astype(int)
    rank_final = acc[last].rank(ascending=False, method="min").astype(int)
    head = [*params, *(f"epoch {e}" for e in shown), f"rank at {v['early_epoch']}", f"rank at {last}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in acc.sort_values(last, ascending=False).index:
        cells = [f"{x:.3g}" if isinstance(x, float) else str(x) for x in key]
        cells += [f"{acc.loc[key, e]:.1%}" for e in shown]
        lines.append("| " + " | ".join(cells + [str(rank_early[key]), str(rank_final[key])]) + " |")
    lines += ["", "| check | verdict | detail |", "|---|---|---|"]
    lines += [f"| {name} | {'PASS' if ok else 'FAIL'} | {detail} |" for name, ok, detail in v["checks"]]
    return "\n".join(lines) + "\n"


def read_run(directory: Path) -> pd.DataFrame:
    """The run's epochs table, checked against its trials table."""
    partial = sorted((directory / "curves").glob("*.csv"))
    if partial and not (directory / "epochs.csv").exists():  # a proxy cut short: its curves so far
        write_proxy_tables(directory, pd.concat(map(pd.read_csv, partial), ignore_index=True))
    trials, epochs = (pd.read_csv(directory / f"{name}.csv") for name in ("trials", "epochs"))
    missing = [c for c in [*PARAMS, "epoch", "accuracy"] if c not in epochs.columns]
    if missing:
        raise ValueError(f"{directory / 'epochs.csv'} lacks column(s) {', '.join(missing)}: "
                         "is it a cifar_* run's results folder?")
    short = trials[trials["epochs"] < trials["epochs"].max()]
    if len(short):
        log.warning("%d of %d trials stopped before epoch %d (early stopping or failure): "
                    "a calibration wants the full grid (cifar_grid)", len(short), len(trials),
                    trials["epochs"].max())
    return epochs


# ---------------------------------------------------------------- how far a linear model gets

def linear_probe(x: np.ndarray, y: np.ndarray, n_fit: int = 4000, epochs: int = 15,
                 seed: int = 0) -> tuple[float, float]:
    """Accuracy of a linear classifier on standardised pixels: on its n_fit training images, and
    on the rest. Data a linear model reads is data whose hyperparameters hardly matter."""
    import torch

    xs = torch.from_numpy(x.reshape(len(x), -1)).float()
    xs = (xs - xs.mean(0)) / (xs.std(0) + 1e-6)
    ys = torch.from_numpy(np.asarray(y)).long()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: a second thread only waits, on a busy machine
    try:
        torch.manual_seed(seed)
        model = torch.nn.Linear(xs.shape[1], int(ys.max()) + 1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(epochs):
            for idx in torch.randperm(n_fit).split(200):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx]).backward()
                opt.step()
        with torch.no_grad():
            hits = (model(xs).argmax(1) == ys).float()
    finally:
        torch.set_num_threads(threads)
    return hits[:n_fit].mean().item(), hits[n_fit:].mean().item()


def probe(n: int = 5000, seed: int = 1) -> str:
    from tuning.trial import synthetic

    rng = np.random.default_rng(seed)
    x, labels, _ = synthetic.images(rng, synthetic.templates(rng), n)
    fit, held_out = linear_probe(x, labels, n_fit=n * 4 // 5)
    return (f"linear model on the pixels of {n} synthetic v{synthetic.VERSION} images (seed {seed}): "
            f"{fit:.1%} on the {n * 4 // 5} it was fitted to, {held_out:.1%} on the other {n - n * 4 // 5}\n")


def examples(path: Path, per_class: int = 6, seed: int = 0) -> Path:
    """A picture of the data: per_class images of each true class, a red frame where the label
    written is another class (docs/synthetic-data-examples.png)."""
    from matplotlib.figure import Figure

    from tuning.trial import synthetic
    from tuning.trial.data import CLASSES

    rng = np.random.default_rng(seed)  # drawn as data.prepare(seed=seed) draws them
    x, labels, clean = synthetic.images(rng, synthetic.templates(rng), 200 * per_class)
    fig = Figure(figsize=(per_class, 8.6), layout="constrained")
    for c, row in enumerate(fig.subplots(len(CLASSES), per_class)):
        for j, (ax, i) in enumerate(zip(row, np.flatnonzero(clean == c)[:per_class])):
            ax.imshow(x[i].transpose(1, 2, 0), interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_ylabel(CLASSES[c] if j == 0 else "", fontsize=9)
            if labels[i] != clean[i]:
                ax.spines[:].set(color="red", linewidth=2)
    fig.suptitle(f"synthetic CIFAR-10 v{synthetic.VERSION}, seed {seed}: {per_class} images of each true "
                 "class\n(red frame: written with a wrong label)", fontsize=9)
    fig.savefig(path, dpi=72)
    return path


# ---------------------------------------------------------------- proxy runs, without Ray

def _train_one(job: dict) -> pd.DataFrame:
    """One configuration's learning curve (runs in a worker process: importable, plain data in).
    Written to job["curve"] after every epoch, so a proxy cut short still leaves its curves."""
    import torch

    from search_spaces._cifar import FIXED
    from tuning.trial import data, trainer

    torch.set_num_threads(job["threads"])
    train, val = data.load_train_val(data.DataSource("synthetic", job["root"]), job["train"], job["val"])
    rows: list[dict] = []
    cfg = {"trial_id": job["trial_id"], "lr": job["lr"], "batch_size": job["batch_size"]}

    def on_epoch(m: dict, state: dict) -> None:
        rows.append({**cfg, "training_iteration": m["epoch"], **{k: m.get(k) for k in CURVE_COLUMNS}})
        write_rows(job["curve"], rows)  # replaced whole: a kill mid-write leaves the epoch before's curve

    trainer.train_cifar(lr=job["lr"], batch_size=job["batch_size"], epochs=job["epochs"], train=train,
                        val=val, seed=job["seed"], device=job["device"], on_epoch=on_epoch, **FIXED)
    log.info("%s: %s", _cfg((job["lr"], job["batch_size"]), PARAMS),
             " ".join(f"{r['accuracy']:.3f}" for r in rows))
    return pd.DataFrame(rows)


def proxy(directory: Path, *, train: int, val: int, epochs: int, lrs: list[float], batch_sizes: list[int],
          seed: int = 0, data_dir: Path = Path("data"), device: str = "cpu", jobs: int = 1,
          threads: int = 1, sizes: tuple[int, int] = (50_000, 10_000)) -> pd.DataFrame:
    """Train every (lr, batch size) on the first `train`/`val` images of the fixed split of the
    synthetic set a run generates (`sizes`: train and test images); write trials.csv and epochs.csv."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tuning.trial import data

    try:  # generated once, before the workers start
        root = data.prepare("synthetic", data_dir, seed=seed, synthetic_train=sizes[0],
                            synthetic_test=sizes[1]).root
    except data.DataError as exc:
        raise ValueError(str(exc)) from None
    (directory / "curves").mkdir(parents=True, exist_ok=True)
    grid = [(lr, bs) for lr in lrs for bs in batch_sizes]
    todo = [{"trial_id": f"proxy_{i:02d}", "lr": lr, "batch_size": bs, "root": root, "train": train,
             "val": val, "epochs": epochs, "seed": seed, "device": device, "threads": threads,
             "curve": directory / "curves" / f"proxy_{i:02d}.csv"} for i, (lr, bs) in enumerate(grid)]
    if jobs == 1:
        results = [_train_one(job) for job in todo]
    else:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_train_one, todo))
    return write_proxy_tables(directory, pd.concat(results, ignore_index=True))


def write_proxy_tables(directory: Path, ep: pd.DataFrame) -> pd.DataFrame:
    """trials.csv and epochs.csv from proxy curves, in the columns a tuning.run folder has."""
    last = ep.groupby("trial_id").tail(1)
    trials = last[["trial_id", *PARAMS, "loss", "accuracy"]].assign(
        epochs=last["epoch"], status="TERMINATED", diverged=last["diverged"].eq(True))
    trials.to_csv(directory / "trials.csv", index=False)
    ep.to_csv(directory / "epochs.csv", index=False)
    return ep


def main(argv: list[str] | None = None) -> int:
    from search_spaces._cifar import PARAMS as SPACE

    parser = cli.Parser(prog="python -m tuning.bench.calibration", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tab = sub.add_parser("table", help="the calibration table of a finished run")
    run = sub.add_parser("proxy", help="train the grid without Ray, on subsets (then the table)")
    lin = sub.add_parser("probe", help="how far a linear model on pixels gets (chance is 10%%)")
    lin.add_argument("--images", type=cli.int_at_least(5), default=5000, help="generated; 4/5 fit, 1/5 held out")
    lin.add_argument("--seed", type=cli.non_negative_int, default=1)
    pic = sub.add_parser("examples", help="a PNG of example images, wrong labels framed in red")
    pic.add_argument("png", type=Path)
    pic.add_argument("--seed", type=cli.non_negative_int, default=0)
    for p in (tab, run):
        p.add_argument("dir", type=Path, help="results folder (trials.csv, epochs.csv)")
        p.add_argument("--early-epoch", type=cli.positive_int, default=2,
                       help="the epoch whose ranking is compared with the final one (default 2)")
    run.add_argument("--train", type=cli.positive_int, default=8000, help="training images (default 8000 of 45000)")
    run.add_argument("--val", type=cli.positive_int, default=2000, help="validation images (default 2000 of 5000)")
    run.add_argument("--epochs", type=cli.positive_int, default=4)
    run.add_argument("--lr", type=cli.comma_separated(cli.positive_float), default=SPACE["lr"].grid_values(),
                     help="comma-separated (default: cifar_grid's 4 points)")
    run.add_argument("--batch-size", type=cli.comma_separated(cli.positive_int),
                     default=SPACE["batch_size"].grid_values())
    run.add_argument("--seed", type=cli.non_negative_int, default=0, help="data and training seed")
    run.add_argument("--data-dir", type=Path, default=Path("data"))
    run.add_argument("--device", default="cpu")
    run.add_argument("--jobs", type=cli.positive_int, default=1, help="configurations trained at once")
    run.add_argument("--threads", type=cli.positive_int, default=1, help="torch threads per configuration")
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if args.command == "probe":
            print(probe(args.images, args.seed), end="")
            return 0
        if args.command == "examples":
            print(f"Examples: {examples(args.png, seed=args.seed)}")
            return 0
        if args.command == "proxy":
            epochs = proxy(args.dir, train=args.train, val=args.val, epochs=args.epochs, lrs=args.lr,
                           batch_sizes=[int(b) for b in args.batch_size], seed=args.seed,
                           data_dir=args.data_dir, device=args.device, jobs=args.jobs, threads=args.threads)
        else:
            epochs = read_run(args.dir)
        v = verdicts(epochs, args.early_epoch)
        text = render(v)
        (args.dir / "calibration.md").write_text(text)
    except (cli.UsageError, OSError, ValueError) as exc:
        print(f"tuning.bench.calibration: error: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0 if v["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
