# The workbench's everyday commands. Each target first runs the set-up, which is
# idempotent: the first time it creates .venv/ and builds Horovod (a few minutes),
# later it checks a stamp and takes a second.
#
#   make lab     start JupyterLab on 127.0.0.1, opened on the first notebook
#   make test    run the whole test suite: tests/ and every notebook
#   make demo    a headless strong-scaling sweep with an HTML report
#   make lint    ruff
#   make doctor  what is installed and whether Horovod jobs can run

SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# horovodrun, workbench and jupyter live in the virtual environment.
export PATH := $(BIN):$(PATH)

# Every notebook, exercises and solutions included, but not Jupyter's checkpoints.
NOTEBOOKS := $(shell find notebooks -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' 2>/dev/null | sort)
FIRST_NOTEBOOK := notebooks/00_welcome.ipynb
# The browser the notebooks run in under `make test` (tests/browser/labdriver.py's).
CHROMIUM := /usr/bin/chromium
LAB_PORT ?= 8888
PYTEST_ARGS ?=
TEST_WORKERS ?= 3

.PHONY: help setup sysdeps lab test demo lint doctor horovod

help:  ## list the targets
	@awk -F ':.*## ' '/^[a-z-]+:.*## / { printf "  make %-8s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

setup:  ## create .venv/ and install everything (idempotent)
	@bash scripts/setup.sh $(SETUP_ARGS)

sysdeps:  ## install the Debian packages the tests need (as root, only if missing)
	@if [ "$$(id -u)" = 0 ]; then bash scripts/install_system_deps.sh; \
	else bash scripts/install_system_deps.sh --check \
	  || echo "Not root: tests that need these packages will be skipped."; fi

lab: setup  ## start JupyterLab on 127.0.0.1 (token authentication), opened on the first notebook
	@open=$$( [ -f $(FIRST_NOTEBOOK) ] && echo --LabApp.default_url=/lab/tree/$(FIRST_NOTEBOOK) ); \
	root=$$( [ "$$(id -u)" = 0 ] && echo --allow-root ); \
	exec $(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
	  --ServerApp.root_dir=$(CURDIR) $$open $$root

# One pytest run over tests/ and the notebooks, so its closing line counts everything.
# The notebooks run in JupyterLab under Chromium (tests/browser/test_every_notebook.py: Run
# All, then the page checked as a student sees it); only where Debian's Chromium is missing
# does nbmake run them instead, so that each notebook runs once either way.
# A failing test, or no test at all (pytest's exit code 5), makes the target fail.
# Three workers, each taking whole files (--dist loadfile): a job test mostly waits for
# processes to start, so three files at a time fit two cores; a file's tests stay together
# because some share a fixture that must exist once (the local Slurm, the two hosts).
# xdist hands out the files with the most tests first (its --loadscope-reorder, on by
# default), so the notebooks, one test each, run last, three at a time, and fill the tail
# evenly; the files listed first only decide the order among equals. (pytest collects a
# file named twice only once.)
# -rs lists every skipped test with its reason (e.g. the Slurm tests, without root).
# The ten slowest items are listed, then the suite's wall time against its budget: the run
# fails when the whole suite takes longer than WORKBENCH_SUITE_BUDGET_MIN minutes (30 unless
# set, 0 for no check; the set-up is not counted; see tests/_budget.py).
# The set-up of make test also installs the system packages (as root), while Horovod compiles.
test: SETUP_ARGS := --with-system-deps
test: setup sysdeps  ## run tests/ and every notebook (in Chromium, else nbmake), browser tests included
	@notebooks="$(NOTEBOOKS) --nbmake --nbmake-timeout=600"; \
	if [ -x $(CHROMIUM) ]; then notebooks=""; fi; \
	set -x; $(BIN)/python -m pytest tests/test_classroom_nbgrader.py $$notebooks tests --durations=10 \
	  -n $(TEST_WORKERS) --dist loadfile -rs \
	  $(PYTEST_ARGS)

demo: setup  ## headless strong-scaling sweep, written to demo-report.html
	$(BIN)/workbench scale --engine horovod --np 1,2 --mode strong --preset compute-bound --epochs 2 --report demo-report.html

lint: setup  ## ruff over the whole repository
	$(BIN)/ruff check .

doctor: setup  ## check the installation
	$(BIN)/workbench doctor

horovod:  ## build and install Horovod again (after fixing what its build needed)
	bash scripts/build_horovod.sh $(BIN)/python
