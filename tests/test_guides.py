"""The migration guides (docs/from-ray-tune.md, docs/from-optuna.md) cannot rot unnoticed: their
own Python blocks run, smoke-sized; the blocks they quote from the ported examples are in those
files word for word (tests/test_examples.py runs the files); the peers' blocks compile; and every
name the tables give as "our way" exists in the code."""

import inspect
import re

import pytest

import tuning
from conftest import ROOT
from tuning import contract, growth, searchresult, spaces
from tuning.run import build_parser

GUIDES = {"from-ray-tune.md": ("Ray Tune", "examples/from_ray_tune.py"),
          "from-optuna.md": ("Optuna", "examples/from_optuna.py")}
# What each guide's own search runs: 3 grid points x 2 samples under ASHA; Optuna's quick start,
# 20 trials of an objective that returns its value (one report each) under tpe.
TRIALS = {"from-ray-tune.md": (6, 2), "from-optuna.md": (20, 1)}
# A block is the peer's code (compiled only), an excerpt of an example (found in it), or ours (run).
BLOCK = re.compile(r"(?:<!-- (?P<mark>[^>]+?) -->\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks(guide: str) -> list[tuple[str | None, str]]:
    return [(m["mark"], m["code"]) for m in BLOCK.finditer((ROOT / "docs" / guide).read_text())]


@pytest.mark.parametrize("guide", GUIDES)
def test_quoted_blocks_are_the_example_word_for_word(guide):
    peer, example = GUIDES[guide]
    blocks = _blocks(guide)
    assert {mark for mark, _ in blocks} <= {None, peer, example}, "a block marked with something unknown"
    quoted = [code for mark, code in blocks if mark == example]
    assert len(quoted) >= 3, f"{guide} quotes {example} in fewer blocks than it did"
    text = (ROOT / example).read_text()
    for code in quoted:
        assert code in text, f"{guide} quotes a block that {example} no longer holds:\n{code}"
    for mark, code in blocks:
        if mark == peer:
            compile(code, f"{guide}: {peer}", "exec")


@pytest.fixture(scope="module")
def ray_once():
    from tuning import backend

    backend.start_ray(num_cpus=2)  # both guides' searches in one Ray (a start costs seconds)
    yield
    backend.stop_ray()


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_own_blocks_run(guide, tmp_path, monkeypatch, ray_once):
    """Together, in order, as a file a reader pastes them into (the trainer check reads the
    trainer's source); tuning.search smoke-sized and into tmp_path."""
    code = "\n".join(code for mark, code in _blocks(guide) if mark is None)
    assert "tuning.search(" in code, f"{guide} has no runnable search of its own"
    script = tmp_path / "guide.py"
    script.write_text(code)
    real, runs = tuning.search, []

    def search(*args, **kwargs):
        runs.append(tmp_path / f"run{len(runs)}")
        return real(*args, **kwargs, smoke=True, results_dir=runs[-1])

    monkeypatch.setattr(tuning, "search", search)
    monkeypatch.chdir(tmp_path)
    names = {"__name__": "__main__", "__file__": str(script)}
    exec(compile(code, str(script), "exec"), names)
    result = names["result"]
    assert result.status == "finished" and result.best is not None and result.results_dir == runs[-1]
    assert result.record.failed == 0
    assert (len(result.trials), result.record.max_epochs) == TRIALS[guide]


def _our_column(guide: str) -> list[str]:
    """The right-hand cells of the guide's concept table: what it says is our way."""
    rows = [line for line in (ROOT / "docs" / guide).read_text().splitlines()
            if line.startswith("| ") and not line.startswith("|---")]
    assert len(rows) > 30, f"{guide} lost its table"
    return [row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows[1:]]


def _flags() -> set[str]:
    return {s for action in build_parser()._actions for s in action.option_strings}


def _keywords() -> set[str]:
    """What a `name=` in our column may be: a keyword of search() or resume(), a Space field, a
    declaration's field, or the trainer contract's."""
    names = set(inspect.signature(tuning.search).parameters) | set(inspect.signature(tuning.resume).parameters)
    for kind in (spaces.Space, *spaces.PARAM_TYPES.values()):
        names |= set(inspect.signature(kind).parameters)
    return names | set(contract.REQUIRED) | set(contract.OPTIONAL)


def _attribute(kind, name: str) -> bool:
    return name in getattr(kind, "__dataclass_fields__", {}) or hasattr(kind, name)


@pytest.mark.parametrize("guide", GUIDES)
def test_every_name_in_our_column_exists(guide):
    flags, keywords = _flags(), _keywords()
    checked = 0
    for cell in _our_column(guide):
        for span in re.findall(r"`([^`]+)`", cell):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", span):
                assert flag in flags, f"{guide}: {flag} is not a flag of tuning.run"
                checked += 1
            for name in re.findall(r"\btuning\.(\w+)", span):
                assert hasattr(tuning, name) or (ROOT / "tuning" / name).exists() or \
                    (ROOT / "tuning" / f"{name}.py").exists(), f"{guide}: tuning.{name} does not exist"
                checked += 1
            for first, second in re.findall(r"\bresult\.(\w+)(?:\.(\w+))?", span):
                assert _attribute(searchresult.SearchResult, first), f"{guide}: SearchResult has no {first}"
                if first == "best" and second:
                    assert _attribute(searchresult.Best, second), f"{guide}: result.best has no {second}"
                checked += 1
            for name in re.findall(r"\b(\w+)=(?!=)", span):
                assert name in keywords, f"{guide}: {name}= is no keyword of search, resume, Space or a declaration"
                checked += 1
            for name in re.findall(r"\b([A-Z]\w*)\(", span):
                assert name in tuning.__all__, f"{guide}: {name} is not in tuning's API"
                checked += 1
            for word in re.findall(r'(?:^|strategy=)"(\w+)"$', span) + re.findall(r'strategy="(\w+)"', span):
                if not re.fullmatch(r"\d+[smh]", word):
                    assert word in spaces.STRATEGIES, f"{guide}: strategy {word!r} does not exist"
                else:
                    growth.parse_duration(word)
                checked += 1
    assert checked > 40, f"{guide}: its table names less of the API than it did ({checked})"


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_are_linked(guide):
    for page in ("README.md", "docs/your-trainer.md"):
        text = (ROOT / page).read_text()
        assert f"{'' if page.startswith('docs') else 'docs/'}{guide}" in text, f"{page} does not link {guide}"
