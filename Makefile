# memstack: two commands on a fresh machine.
#   make demo   set everything up, start the broker, run the demo on embedded defaults
#   make test   run the whole test suite (it starts and stops its own broker)
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
# A CPU build of torch, when this machine keeps one as a wheel, is taken from here instead of
# the multi-GB CUDA build on PyPI (pip prefers 2.13.0+cpu over 2.13.0 for the pin torch==2.13.0).
WHEELS ?= /opt/wheels
FIND_LINKS := $(if $(wildcard $(WHEELS)/*.whl),--find-links $(WHEELS),)
PYTEST_ARGS ?=

.PHONY: demo test test-fast install jars up down status lint typecheck bench clean

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q --upgrade pip
	$(PY) -m pip install --disable-pip-version-check -q $(FIND_LINKS) -e '.[server,dev]'
	@touch $@

install: $(VENV)/.installed

jars: install
	$(PY) -c 'from memstack.infra.jars import resolve_jars; print(resolve_jars())'

up: install
	$(PY) -m memstack.cli infra up

down: install
	$(PY) -m memstack.cli infra down

status: install
	$(PY) -m memstack.cli infra status

demo: up
	$(PY) -m memstack.cli demo

# Two pytest lanes at once (tests/lanes.sh says why); PYTEST_ARGS=... runs one plain pytest.
test: install
	bash tests/lanes.sh $(PY) $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

typecheck: install
	$(PY) tests/typecheck.py

lint: install
	$(VENV)/bin/ruff check memstack schemas operators pipelines jobs infra tests
	$(PY) tests/typecheck.py

clean:
	rm -rf .memstack out
