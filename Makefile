# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
SPACE ?= cifar_asha
ARGS ?=

.PHONY: run test test-all gpu-check install clean

run: $(VENV)/.installed
	$(PY) -m tuning.run --space $(SPACE) $(ARGS)

# Two pytest-xdist workers, a module each at a time (tests/conftest.py: the longest modules first),
# then the few tests marked alone in one process (exit 5: ARGS named none of them). TEST_WORKERS=0
# runs the whole suite in one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
ALONE = $(if $(XDIST),$(PY) -m pytest -m "$(1)" $(ARGS) || test $$? -eq 5)

test: $(VENV)/.installed
	$(PY) -m pytest $(XDIST) $(ARGS)
	$(call ALONE,alone and not slow)

# Includes the tests marked slow.
test-all: $(VENV)/.installed
	$(PY) -m pytest -m "" $(XDIST) $(ARGS)
	$(call ALONE,alone)

# Every GPU measurement in one go (docs/performance.md, GPU check); without a GPU, the CPU side and exit 0.
gpu-check: $(VENV)/.installed
	$(PY) -m tuning.bench.gpucheck $(ARGS)

install: $(VENV)/.installed

# pip compiles the packages' bytecode one file at a time (40 s of a 2-minute install on 2 cores);
# compileall does it on every core. A few of the packages' files never compile (hpbandster's
# successiveresampling.py, torch's Python 3.12 examples): pip passes over them silently, so does this.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -e '.[dev,cluster,mlflow,bench]'
	$(PY) -m compileall -q -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || true
	touch $@

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
