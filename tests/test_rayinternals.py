"""Each Ray private name tuning patches or reads (tuning/backend/rayinternals.py), checked against the
installed Ray: a test per target, which fails when Ray renames it, changes the signature patched, or
stops behaving as the patch relies on. Run it first when trying another Ray."""

import inspect
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import ray
from ray.tune.execution.tune_controller import TuneController
from ray.tune.trainable.metadata import _TrainingRunMetadata

from tuning.backend import rayinternals, snapshots

ROOT = Path(__file__).resolve().parents[1]


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_installed_ray_is_the_one_the_patches_were_written_for():
    assert rayinternals.version_problem() is None, rayinternals.version_problem()
    assert rayinternals.version_problem(f"{rayinternals.WRITTEN_FOR}.3") is None
    other = rayinternals.version_problem("2.61.0")
    assert other is not None and "\n" not in other and "2.61.0" in other and "ray[tune]==2.60.*" in other


def test_another_ray_is_one_warning_line_at_import(tmp_path):
    code = ("import logging, ray; ray.__version__ = '2.61.0'; logging.basicConfig(level=logging.INFO); "
            "import tuning.backend.rayinternals")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if "rayinternals" in ln]
    assert len(lines) == 1 and "WARNING" in lines[0] and "Ray 2.61.0 is installed" in lines[0], done.stderr


def test_patches_nest_are_put_back_and_a_missing_target_says_so_in_one_line():
    holder = SimpleNamespace(f="ray's")
    with rayinternals.patched((holder, "f", "ours")):
        with rayinternals.patched((holder, "f", "a second's")):
            assert holder.f == "ours" and rayinternals.original(holder, "f") == "ray's"
        assert holder.f == "ours"
    assert holder.f == "ray's" and rayinternals.original(holder, "f") == "ray's"
    with pytest.raises(rayinternals.RayChanged, match="has no .*gone, which tuning patches"):
        with rayinternals.patched((holder, "gone", None)):
            pass


@pytest.fixture
def controller(ray_2cpus, tmp_path):
    """A real TuneController with one trial, as tune.run builds it, never run."""
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp")
    made = TuneController(storage=storage)
    made.add_trial(Trial("f", config={"lr": 0.5, "name": 'a "quoted" \u00e9'}, storage=storage, stub=True))
    return made


def test_tune_controller_checkpoint_and_the_snapshot_clock(controller):
    # What snapshots._checkpoint wraps: Ray's checkpoint(force, wait), and the clock it reads.
    assert _params(TuneController.checkpoint) == [("self", inspect.Parameter.empty), ("force", False), ("wait", False)]
    before = rayinternals.snapshot_clock(controller)
    assert before.marked and not before.forced  # a trial added is marked to be written
    assert before.saved_at == float("-inf") and before.launched_at is None
    rayinternals.take_snapshot(controller, force=True)
    after = rayinternals.snapshot_clock(controller)
    assert after.saved_at > before.saved_at  # the clock moves when Ray writes a snapshot...
    assert after.launched_at is not None  # ...and launches its copy to storage
    assert not after.forced


def test_tune_controller_save_to_dir_writes_what_ours_writes(controller):
    staging = Path(controller._storage.experiment_driver_staging_path)
    controller.save_to_dir()  # Ray's own
    theirs = {p.name: p.read_bytes() for p in staging.iterdir()}
    for p in staging.iterdir():
        p.unlink()
    rayinternals.write_snapshot(controller, snapshots.state_chunks)
    ours = {p.name: p.read_bytes() for p in staging.iterdir()}
    assert ours.keys() == theirs.keys() and len(ours) == 2  # the experiment state and the searcher's
    state = next(name for name in ours if name.startswith("experiment_state"))
    # All of Ray's state but the stoppers, which a resume put in place of those tune.run was given.
    mine, ray = json.loads(ours.pop(state)), json.loads(theirs.pop(state))
    assert "_stopper" in ray["runner_data"]
    del ray["runner_data"]["_stopper"]
    assert mine == ray and ours == theirs


def test_pending_trials_held_paused_are_out_of_the_queue_tune_starts_by_itself(controller):
    # What budget.TimeGate relies on: Tune stages and starts every trial in _pending_trials without
    # asking the scheduler; a PAUSED one only when the scheduler's choose_trial_to_run returns it.
    from ray.tune.experiment import Trial

    [trial] = controller.get_trials()
    assert trial.status == Trial.PENDING and trial in controller._pending_trials
    rayinternals.mark_paused(controller._wrapped(), trial)  # as a scheduler is handed the controller
    assert trial.status == Trial.PAUSED and trial in controller._paused_trials
    assert not controller._pending_trials and not any(controller._resources_to_pending_trials.values())


def test_training_run_metadata_update_metric_keeps_statistics_only_for_numbers_read():
    empty = inspect.Parameter.empty
    assert _params(_TrainingRunMetadata.update_metric) == [("self", empty), ("metric", empty), ("value", empty),
                                                           ("step", 1)]
    plain = _TrainingRunMetadata()
    plain.update_metric("rss_mb", 10.0)
    assert "rss_mb" in plain.metric_analysis  # what the patch saves: Ray keeps every numeric key
    with snapshots.cheaper():
        meta = _TrainingRunMetadata()
        meta.update_metric("rss_mb", 10.0)
        meta.update_metric("loss", 0.5)
        meta.update_metric("loss", 0.25, step=2)
    assert "rss_mb" not in meta.metric_analysis
    assert meta.metric_analysis["loss"]["min"] == 0.25 and meta.metric_analysis["loss"]["last"] == 0.25


def test_tune_run_tags_callbacks_through_the_module_attribute_the_patch_replaces():
    import ray.air._internal.usage as air_usage
    import ray.tune.tune as tune_module
    from ray._common.usage.usage_lib import TagKey

    assert "air_usage.tag_callbacks(callbacks)" in inspect.getsource(tune_module.run)
    assert _params(air_usage.tag_callbacks) == [("callbacks", inspect.Parameter.empty)]
    assert TagKey.AIR_CALLBACKS is not None
    with snapshots.cheaper():
        assert air_usage.tag_callbacks is snapshots.tag_callbacks
    assert air_usage.tag_callbacks is rayinternals.original(air_usage, "tag_callbacks")


def test_experiment_analysis_reads_the_trials_result_files_through_the_method_replaced():
    from ray.tune import ExperimentAnalysis

    assert _params(ExperimentAnalysis._fetch_trial_dataframes) == [("self", inspect.Parameter.empty)]
    assert "self._fetch_trial_dataframes()" in inspect.getsource(ExperimentAnalysis.__init__)
    with snapshots.cheaper():
        assert ExperimentAnalysis._fetch_trial_dataframes is snapshots._no_dataframes
    assert ExperimentAnalysis._fetch_trial_dataframes is rayinternals.original(ExperimentAnalysis,
                                                                                "_fetch_trial_dataframes")


def test_class_cache_default_env_vars_go_into_every_trial_actor_unless_left_out():
    from ray.tune.execution import class_cache

    assert rayinternals.tune_actor_env() == {"PL_DISABLE_FORK": "1"}  # cluster.TUNE_WORKER_ENV's copy

    class T:
        pass

    def env_of(cls):
        return class_cache._ActorClassCache().get(cls)._default_options["runtime_env"].get("env_vars", {})

    assert env_of(T) == {"PL_DISABLE_FORK": "1"}
    with rayinternals.without_tune_actor_env(set()):
        assert "PL_DISABLE_FORK" not in env_of(type("U", (), {}))  # read when the actor class is made
    assert rayinternals.tune_actor_env() == {"PL_DISABLE_FORK": "1"}


def test_the_drivers_aws_credentials_go_into_every_trial_actor_unless_left_out(monkeypatch):
    from ray.tune.execution import class_cache

    def env_of(cls):
        return class_cache._ActorClassCache().get(cls)._default_options["runtime_env"].get("env_vars", {})

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "old")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "new")
    assert {"AWS_ACCESS_KEY_ID": "old", "AWS_SESSION_TOKEN": "new"}.items() <= rayinternals.tune_propagated_env().items()
    assert env_of(type("T", (), {}))["AWS_ACCESS_KEY_ID"] == "old"
    with rayinternals.without_tune_actor_env({"AWS_SESSION_TOKEN", "NOT_TUNES"}):
        assert env_of(type("U", (), {})) == {"AWS_SESSION_TOKEN": "new"}
    assert env_of(type("V", (), {}))["AWS_ACCESS_KEY_ID"] == "old"


def test_the_token_auth_probe_connects_to_a_gcs_and_turns_token_mode_on_by_the_argument_passed(ray_2cpus):
    from ray._private.authentication import authentication_token_setup

    assert "warn_if_disabled" in inspect.signature(
        authentication_token_setup.maybe_enable_token_auth_if_token_available).parameters
    assert isinstance(rayinternals.enable_token_auth_if_available(), bool)
    rayinternals.connect_gcs(ray.get_runtime_context().gcs_address)  # GcsClient(address=...): this driver's own Ray


def test_the_address_ray_start_wrote_down_is_read_where_ray_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert rayinternals.started_address() is None
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.5:6379\n")
    assert rayinternals.started_address() == "10.0.0.5:6379"


def test_cli_reporter_private_settings_and_best_trial_hook():
    seen = []

    class Looking(rayinternals.Reporter):
        def best_trial(self, best):
            seen.append(best)
            return best

    table = Looking(metric="loss", mode="min", parameter_columns=["lr", "momentum"], sort_by_metric=True)
    assert (table.metric, table.mode, table.parameters) == ("loss", "min", ["lr", "momentum"])
    table.sort_finished_by_metric(False)
    assert table._sort_by_metric is False
    trials = [SimpleNamespace(last_result={"loss": v, "config": {"lr": 0.1}}, trial_id=str(v)) for v in (0.5, 0.2)]
    best, metric = table._current_best_trial(trials)  # what the table's "Current best trial" line asks
    assert metric == "loss" and best.trial_id == "0.2" and seen == [best]


def test_optuna_search_private_state_and_telling_optuna_a_trial_ended():
    from ray.tune.search.optuna import OptunaSearch

    search = OptunaSearch(space=lambda t: {"x": t.suggest_float("x", 0, 1)}, metric="loss", mode="min",
                          sampler=optuna.samplers.RandomSampler(seed=0))
    search.suggest("t1")
    trial = rayinternals.optuna_trial(search, "t1")
    assert trial is not None and rayinternals.optuna_trial(search, "unknown") is None
    rayinternals.tell_optuna(search, "t1", optuna.trial.TrialState.PRUNED)
    assert rayinternals.optuna_trial(search, "t1") is None
    search.on_trial_complete("t1", {"loss": 0.1})  # Ray's own: told already, so nothing more
    assert [t.state for t in search._ot_study.trials] == [optuna.trial.TrialState.PRUNED]


def test_start_ray_leaves_logging_as_the_caller_set_it(tmp_path):
    """A library call (import tuning, a RunSpec, backend.start_ray) configures no output: the "ray"
    logger keeps the level its user gave it, and the root logger gets no handler."""
    code = """
import logging, json
import ray
logging.getLogger("ray").setLevel(logging.ERROR)
import tuning
from tuning import Space, Uniform, backend
root = list(logging.getLogger().handlers)
optuna_level = logging.getLogger("optuna").level
backend.RunSpec(space=Space(params={"x": Uniform(0.0, 1.0)}, trainer="tuning.bench.scale:noop"), strategy="tpe",
                num_samples=1, max_epochs=1, seed=0, cpus_per_trial=1, gpus_per_trial=0, source=None, results_dir=".")
backend.start_ray(num_cpus=1)
print(json.dumps({"ray": logging.getLogger("ray").level, "root": logging.getLogger().handlers == root,
                  "optuna": logging.getLogger("optuna").level == optuna_level,
                  "filters": [type(f).__name__ for h in logging.getLogger("ray").handlers for f in h.filters]}))
backend.stop_ray()
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"ray": logging.ERROR, "root": True, "optuna": True, "filters": []}
    assert "Started a local Ray instance" not in done.stderr  # the user's ERROR level held through ray.init


# Tune's searches and schedulers, as strategies, hyperband, bohb, adaptive and mo use them.

def test_a_restored_variant_generator_goes_on_drawing_more_samples(tmp_path):
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    gen = BasicVariantGenerator(random_state=0)
    gen.add_configurations([tune.Experiment("e", run=lambda config: None, config={"x": tune.uniform(0, 1)},
                                            num_samples=2, storage_path=str(tmp_path))])
    first = [gen.next_trial() for _ in range(3)]
    assert first[2] is None and gen.is_finished()
    adopted = []
    rayinternals.add_samples(gen, 2, adopt_as=adopted.append)
    assert not gen.is_finished() and adopted == rayinternals.iterators(gen)[-1:]
    assert isinstance(adopted[0], rayinternals.TrialIterator)
    more = [gen.next_trial() for _ in range(3)]
    assert more[2] is None and gen.is_finished()
    configs = [t.config["x"] for t in first[:2] + more[:2]]
    assert len(set(configs)) == 4  # the random stream went on: new configurations


def test_adopt_makes_rays_object_a_subclass_keeping_its_state(tmp_path):
    class Mine(rayinternals.TrialIterator):
        pass

    it = rayinternals.TrialIterator(uuid_prefix="u", num_samples=1, unresolved_spec={"config": {}})
    rayinternals.adopt(it, Mine, params={"a": 1})
    assert type(it) is Mine and it.params == {"a": 1} and it.uuid_prefix == "u"


def test_a_restored_search_generator_goes_on_to_more_trials():
    from ray.tune.search import SearchGenerator, Searcher

    gen = SearchGenerator(Searcher(metric="loss", mode="min"))
    gen.set_finished()
    rayinternals.add_suggestions(gen, 3)
    assert not gen.is_finished() and gen._total_samples == gen._counter + 3


def test_asha_rungs_and_the_schedulers_objective():
    from ray.tune.schedulers import ASHAScheduler

    asha = ASHAScheduler(metric="loss", mode="min", max_t=9, grace_period=1, reduction_factor=3)
    assert rayinternals.objective(asha) == ("training_iteration", "loss", -1.0)
    assert [[m for m, _ in rayinternals.rungs(b)] for b in rayinternals.asha_brackets(asha)] == [[9, 3, 1]]
    assert all(isinstance(b, rayinternals.AsyncBracket) for b in rayinternals.asha_brackets(asha))
    rayinternals.rungs(rayinternals.asha_brackets(asha)[0])[1][1]["t1"] = -0.5  # a rung rebuilt on a resume
    assert asha._brackets[0]._rungs[1][1] == {"t1": -0.5}
    from ray.tune.experiment import Trial

    trial = Trial("tpe", stub=True, trial_id="t2")
    asha.on_trial_add(None, trial)
    assert rayinternals.asha_brackets(asha, of_trials=True) == {"t2": rayinternals.asha_brackets(asha)[0]}


def test_the_median_rules_results_and_its_too_few_others_hook():
    asked = []

    class Going(rayinternals.MedianStoppingRule):
        def too_few_others(self, tune_controller, trial, time):
            asked.append(time)
            return "CONTINUE"

    rule = Going(metric="loss", mode="min")
    assert rayinternals.median_results(rule) == {} and rayinternals.objective(rule) == ("time_total_s", "loss", -1.0)
    assert rule._on_insufficient_samples(None, object(), 3.0) == "CONTINUE" and asked == [3.0]
    assert "self._on_insufficient_samples(" in inspect.getsource(ray.tune.schedulers.MedianStoppingRule.on_trial_result)


def test_hyperband_brackets_and_hooks_under_public_names():
    from ray.tune.schedulers import HyperBandScheduler

    made, unpaused = [], []

    class Bands(rayinternals.HyperBand):
        def create_bracket(self, s):
            made.append(s)
            return rayinternals.Bracket(**self.bracket_settings(s), s=s)

        def unpause_trial(self, tune_controller, trial):
            unpaused.append(trial)

    bands = Bands(metric="loss", mode="min", max_t=9, reduction_factor=3)
    assert (bands.band, bands.brackets_per_band, bands.bands, bands.trial_brackets) == (0, 3, [[]], {})
    assert bands.first_budget(2) == 1 and bands.first_budget(0) == 9
    bracket = bands._create_bracket(2)  # what Tune calls when a trial opens a bracket
    assert made == [2] and (bracket.quota, bracket.first_budget, bracket.budget) == (9, 1, 1)
    trial = object()
    bracket.add_trial(trial)
    assert bracket.all_trials == [trial] and trial in bracket.live_trials
    bands._unpause_trial(None, trial)
    assert unpaused == [trial]
    assert "self._create_bracket(" in inspect.getsource(HyperBandScheduler.on_trial_add)
    assert _params(HyperBandScheduler._process_bracket)[:3] == [("self", inspect.Parameter.empty),
                                                                ("tune_controller", inspect.Parameter.empty),
                                                                ("bracket", inspect.Parameter.empty)]


def test_tune_bohb_makes_its_model_through_the_hook_and_jobs_are_what_hpbandster_reads():
    import ConfigSpace

    space = ConfigSpace.ConfigurationSpace(seed=0)
    space.add(ConfigSpace.UniformFloatHyperparameter("x", 0.0, 1.0))
    made = []

    class Model(rayinternals.tune_bohb()):
        def make_model(self, config_space, settings):
            made.append(config_space)
            return super().make_model(config_space, settings)

    search = Model(space=space, metric="loss", mode="min", seed=0)
    assert made == [space] and search.config_space is space and search.sign == 1.0
    job = rayinternals.bohb_job(0.5, 3, {"x": 0.1})
    search.bohber.new_result(job)  # HpBandSter's model takes it
    assert job.result["loss"] == 0.5 and job.kwargs == {"budget": 3, "config": {"x": 0.1}}
