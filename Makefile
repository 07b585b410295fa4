# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
SPACE ?= cifar_asha
ARGS ?=

.PHONY: run test test-all gpu-check install clean

run: $(VENV)/.installed
	$(PY) -m tuning.run --space $(SPACE) $(ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest $(ARGS)

# Includes the tests marked slow.
test-all: $(VENV)/.installed
	$(PY) -m pytest -m "" $(ARGS)

# Every GPU measurement in one go (README: GPU check); without a GPU, the CPU side and exit 0.
gpu-check: $(VENV)/.installed
	$(PY) -m tuning.bench.gpucheck $(ARGS)

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,cluster,mlflow]'
	touch $@

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
