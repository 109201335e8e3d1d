# Build and test toolchain. `make test` is what CI runs (via .ci/run).
#
#   make test                     lint + Django checks + pytest, every leg: unit and
#                                 integration on SQLite, integration on PostgreSQL and
#                                 MariaDB; on the last leg also processes (PostgreSQL,
#                                 MariaDB; SQLite's own) and browser (SQLite)
#   make test LEGS=py312-dj61     one leg only
#   make test MARKERS=unit        one tier (unit, integration, processes, browser) or any
#                                 marker expression: "integration and not slow"
#   make test PYTEST_ARGS="-x -k steps" PYTEST_WORKERS=0
#   make docs                     the documentation site (docs/) into .tmp/docs/html,
#                                 warnings as errors; make test builds it on the last leg
#   make lint | make format | make venv | make clean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
MAKEFLAGS += --no-print-directory

LEGS ?= py311-dj52 py312-dj61
PG_URL ?= postgres://postgres@127.0.0.1:5432/durable_jobs
MARIADB_URL ?= mysql://root@127.0.0.1:3306/durable_jobs
PG_OPTIONS_URL ?= postgres://postgres@127.0.0.1:5432/durable_jobs_options
PG_PSYCOPG2_URL ?= postgres://postgres@127.0.0.1:5432/durable_jobs_psycopg2
PYTEST_ARGS ?=
# The tests are in tiers, a folder and a marker each (tests/conftest.py; CONTRIBUTING.md
# "Tests in tiers"). The SQLite suite runs every tier; PostgreSQL and MariaDB run the tiers
# that read the database: unit has none, and the browser tier's pages are the admin whose
# queries integration tests cover on every database through the test client.
ALL_TIERS := unit or integration or processes or browser
# The browser tier runs on the last leg of LEGS only: its pages are ours (templates,
# CSS, script), which no Python or Django version changes, and the admin's HTML they
# sit in is checked on every leg by integration tests through the test client. It is
# the slowest tier for its size (a Chromium each), and CI has a time limit.
# So does the processes tier (real runjobs processes: kill -9, leases, clock skew, the
# fault slice), on every database: it is three quarters of a suite's time (SQLite:
# 194 of 260 s), and what it adds to the integration tier, which runs the same worker
# code in-process on every leg, is about processes and databases, not about the Python
# or Django version. `make test LEGS=py311-dj52` runs every tier on that leg.
LAST_LEG := $(lastword $(LEGS))
ON_LAST_LEG = $(filter $(LEG),$(LAST_LEG))
ON_FIRST_LEG = $(filter $(LEG),$(firstword $(LEGS)))
# The processes tier on SQLite (kill -9, zombies, the fault slice on its one write
# lock) is left to `make test SQLITE_PROCESSES=1` and `make faults`: it took 230 of the
# last leg's 334 s on SQLite (2026-12-06), and CI has 20 minutes (CONTRIBUTING.md "The
# CI budget"). By default SQLite runs the processes tests about SQLite itself (marker
# `sqlite`: the example project, the tutorial, a new user's fresh file).
SQLITE_PROCESSES ?= 0
SQLITE_LAST_TIERS = $(if $(filter 1,$(SQLITE_PROCESSES)),$(ALL_TIERS),unit or integration or browser or (processes and sqlite))
SQLITE_TIERS = $(if $(ON_LAST_LEG),$(SQLITE_LAST_TIERS),unit or integration)
DATABASE_TIERS = $(if $(ON_LAST_LEG),integration or processes,integration)
# The processes tier runs on MariaDB too (last leg, beside PostgreSQL's): kill -9, clock
# skew, the fault slice on its locks and polling. It adds 1.5 minutes to CI (a fresh
# clone's `bash .ci/run`: 475 s with it, 387 s without, 2026-12-05); MARIADB_PROCESSES=0
# leaves it out.
MARIADB_PROCESSES ?= 1
MARIADB_TIERS = $(if $(filter 1,$(MARIADB_PROCESSES)),$(DATABASE_TIERS),integration)
# Narrows every suite (a marker expression); a suite it leaves empty passes.
MARKERS ?=
# Test processes per suite (pytest-xdist; each gets its own test database). Most of the
# suite's time is real worker processes waiting on leases and polls, so 3 on 2 cores
# pays; PYTEST_WORKERS=0 runs in one process (easier to read a failure).
PYTEST_WORKERS ?= 3
PIP_FLAGS ?= -q --disable-pip-version-check

# One virtualenv per leg: interpreter (pyenv version + binary) and Django range.
PYENV_py311-dj52 := 3.11.7
PYBIN_py311-dj52 := python3.11
DJANGO_py311-dj52 := Django>=5.2,<5.3
PYENV_py312-dj61 := 3.12.1
PYBIN_py312-dj61 := python3.12
DJANGO_py312-dj61 := Django>=6.1,<6.2
# Not in LEGS (CI has 20 minutes): the newest Python with the Django release between
# the two, for `make test LEGS=py313-dj60` by hand.
PYENV_py313-dj60 := 3.13.0
PYBIN_py313-dj60 := python3.13
DJANGO_py313-dj60 := Django>=6.0,<6.1

FIRST_LEG := $(firstword $(LEGS))
# The leg a single-leg target works on (test-leg, venv-leg); defaults to the first.
LEG ?= $(FIRST_LEG)
BIN = .venv/$(LEG)/bin
# Every tool runs from the repo root with no inherited database or settings choice, and
# with bytecode written: PYTHONDONTWRITEBYTECODE (set in many container images, this
# machine's too) makes every process compile the package's modules afresh and pytest
# rewrite every test module in each xdist process: collecting the tests took 7.2 s of
# CPU instead of 2.5, a runjobs start 0.55 s instead of 0.4, hundreds of times a run.
CLEAN_ENV := env -u DATABASE_URL -u DJANGO_SETTINGS_MODULE -u PYTHONDONTWRITEBYTECODE
# $(call pytest,TIERS): pytest on those tiers narrowed by MARKERS; exit code 5 (nothing
# selected, e.g. MARKERS=unit on PostgreSQL) is not a failure.
pytest = $(BIN)/python -m pytest -n $(PYTEST_WORKERS) \
	-m "$(if $(MARKERS),($(1)) and ($(MARKERS)),$(1))" $(PYTEST_ARGS) $(2) || [ $$? -eq 5 ]
# The integration tests that go through a driver's own paths (claims, step writes,
# outcomes, verbs): the suites of Django's other ways to reach PostgreSQL run these.
DRIVER_PATHS ?= tests/integration/db tests/integration/worker tests/integration/verbs

.PHONY: test test-leg lint format venv venv-leg clean faults soak docs docs-leg

test:
	@for leg in $(LEGS); do $(MAKE) test-leg LEG=$$leg; done

# Lint once, on the first leg: ruff and mypy (django-stubs) read the code, not the
# installed Django, so a second leg would check the same thing again.
test-leg: .venv/$(LEG)/.installed
	$(if $(ON_FIRST_LEG),@$(MAKE) lint LEG=$(LEG))
	$(if $(ON_LAST_LEG),@$(MAKE) docs-leg LEG=$(LEG))
	@echo "== $(LEG) / django checks =="
	$(CLEAN_ENV) $(BIN)/python manage.py check --fail-level WARNING
	$(CLEAN_ENV) DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python -m django check --fail-level WARNING
	$(CLEAN_ENV) DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python -m django makemigrations --check --dry-run
	@echo "== $(LEG) / sqlite =="
	$(CLEAN_ENV) $(call pytest,$(SQLITE_TIERS))
	@echo "== $(LEG) / mariadb checks =="
	@# The database checks (W030: unapplied migrations) read the database: migrate it first.
	$(CLEAN_ENV) DATABASE_URL='$(MARIADB_URL)' $(BIN)/python manage.py migrate --noinput -v 0
	$(CLEAN_ENV) DATABASE_URL='$(MARIADB_URL)' DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python -m django migrate --noinput -v 0
	$(CLEAN_ENV) DATABASE_URL='$(MARIADB_URL)' $(BIN)/python manage.py check --database default --fail-level WARNING
	$(CLEAN_ENV) DATABASE_URL='$(MARIADB_URL)' DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python -m django check --database default --fail-level WARNING
	@# On the first leg PostgreSQL's suite connects with Django's other options
	@# (server-side binding and a pool; the last leg's connects plainly), then the
	@# database's, the worker's and the verbs' tests run through psycopg2.
	@$(MAKE) $(if $(filter 1,$(PARALLEL_DATABASES)),-j2 --output-sync=target) \
		$(if $(ON_FIRST_LEG),suite-postgresql-options,suite-postgresql) suite-mariadb LEG=$(LEG)
	$(if $(ON_FIRST_LEG),@$(MAKE) suite-postgresql-psycopg2 LEG=$(LEG))

# One suite per database server (separate test databases): PARALLEL_DATABASES=1 runs the
# two side by side, each one's output printed whole when it ends. Their time is mostly
# real worker processes waiting on leases and polls, so two on 2 cores pays, as the
# xdist processes within a suite do; PARALLEL_DATABASES=0 runs one after the other.
PARALLEL_DATABASES ?= 1
.PHONY: suite-postgresql suite-mariadb suite-postgresql-options suite-postgresql-psycopg2
suite-postgresql:
	@echo "== $(LEG) / postgresql =="
	$(CLEAN_ENV) DATABASE_URL='$(PG_URL)' $(call pytest,$(DATABASE_TIERS))
suite-mariadb:
	@echo "== $(LEG) / mariadb =="
	$(CLEAN_ENV) DATABASE_URL='$(MARIADB_URL)' $(call pytest,$(MARIADB_TIERS))
# PostgreSQL with Django's other ways to connect, OPTIONS={"server_side_binding": True,
# "pool": True} (tests/settings.py): the first leg's PostgreSQL suite, on a test
# database of its own. (It was a third suite of DRIVER_PATHS beside a plain one on both
# legs: CI's time, CONTRIBUTING.md "The CI budget".)
suite-postgresql-options:
	@echo "== $(LEG) / postgresql, server-side binding and a pool =="
	$(CLEAN_ENV) DATABASE_URL='$(PG_OPTIONS_URL)' DURABLE_JOBS_TEST_CONNECTION_OPTIONS=1 \
		$(call pytest,$(DATABASE_TIERS))
# PostgreSQL through psycopg2, Django's other driver: psycopg 3 hidden from the tests
# (scripts/psycopg2_only), DRIVER_PATHS on a test database of its own.
suite-postgresql-psycopg2:
	@echo "== $(LEG) / postgresql through psycopg2 =="
	$(CLEAN_ENV) DATABASE_URL='$(PG_PSYCOPG2_URL)' PYTHONPATH=scripts/psycopg2_only \
		$(call pytest,integration,$(DRIVER_PATHS))

lint: .venv/$(LEG)/.installed
	@echo "== $(LEG) / lint =="
	$(CLEAN_ENV) $(BIN)/ruff check .
	$(CLEAN_ENV) $(BIN)/ruff format --check .
	$(CLEAN_ENV) $(BIN)/mypy django_durable_jobs tests example_project benchmarks

# The documentation site (docs/: Sphinx, Furo, MyST; CONTRIBUTING.md "Documentation"),
# built whole (-E: the commands reference prints each command's --help at build time) with
# warnings as errors: a broken link or a heading a link names is a failure. Once per
# `make test`, on the last leg (its pages do not change with the Python or Django version).
DOCS_OUT ?= .tmp/docs
docs:
	@$(MAKE) docs-leg LEG=$(LAST_LEG)

docs-leg: .venv/$(LEG)/.installed
	@echo "== $(LEG) / docs =="
	$(CLEAN_ENV) $(BIN)/python -m sphinx -E -W --keep-going -q -b html -d $(DOCS_OUT)/doctrees docs $(DOCS_OUT)/html
	@echo "docs: $(DOCS_OUT)/html/index.html"

format: .venv/$(LEG)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

venv:
	@for leg in $(LEGS); do $(MAKE) venv-leg LEG=$$leg; done

venv-leg: .venv/$(LEG)/.installed
	@:

# Idempotent: the venv is created once; the install re-runs whenever pyproject.toml changes.
# First the system packages (scripts/system-packages installs them, or says what to run;
# given the interpreter, it checks that it has the headers a C extension is built with)
# and the leg's interpreter, each with a one-line message instead of a build failure.
.venv/%/.installed: pyproject.toml
	@test -n "$(PYENV_$*)" || { echo "unknown leg '$*' (known: py311-dj52 py312-dj61 py313-dj60)" >&2; exit 2; }
	@PYENV_VERSION=$(PYENV_$*) scripts/system-packages $(PYBIN_$*)
	@PYENV_VERSION=$(PYENV_$*) $(PYBIN_$*) -c 'import venv, ensurepip' 2>/dev/null || { echo \
		"make test needs $(PYBIN_$*) with venv: pyenv install $(PYENV_$*)" \
		"(or sudo apt-get install -y $(PYBIN_$*)-venv), or LEGS=... for the other leg" >&2; exit 2; }
	@echo "== $* / venv =="
	test -x .venv/$*/bin/python || PYENV_VERSION=$(PYENV_$*) $(PYBIN_$*) -m venv .venv/$*
	.venv/$*/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	.venv/$*/bin/python -m pip install $(PIP_FLAGS) -e ".[dev]" "$(DJANGO_$*)"
	@.venv/$*/bin/python -c 'import django, sys; print("$*: Python %s, Django %s" % (sys.version.split()[0], django.get_version()))'
	@touch $@

clean:
	rm -rf .venv .tmp

# The whole fault-injection battery (CONTRIBUTING.md; CI runs its middle slice, marked
# processes but not faults): every fault point x action x position with real workers, on
# SQLite and PostgreSQL, then the database restart under load (RESTART_CLUSTER names the
# PostgreSQL it may restart). Selected by marker in tests/processes.
#   make faults RESTART_CLUSTER="15 faults" RESTART_URL=postgres://postgres@127.0.0.1:5433/dj
# (a cluster of its own: pg_createcluster 15 faults --port 5433 --start -- --auth-host=trust)
RESTART_CLUSTER ?=
RESTART_URL ?= postgres://postgres@127.0.0.1:5433/durable_jobs
# The processes tier (the zombie, supervisor and kill -9 tests, CI's slice of the matrix)
# with the rest of the battery, marked faults; not the soak.
FAULTS := faults or (processes and not soak)
# The soak: mixed load under random SIGKILLs for SOAK_SECONDS, on SOAK_URL (default PostgreSQL).
SOAK_SECONDS ?= 600
SOAK_URL ?= $(PG_URL)
soak: .venv/$(LEG)/.installed
	$(CLEAN_ENV) DATABASE_URL='$(SOAK_URL)' DURABLE_JOBS_SOAK_SECONDS='$(SOAK_SECONDS)' \
	  $(BIN)/python -m pytest -s -m soak tests/processes $(PYTEST_ARGS)
faults: .venv/$(LEG)/.installed
	$(CLEAN_ENV) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "$(FAULTS)" tests/processes $(PYTEST_ARGS)
	$(CLEAN_ENV) DATABASE_URL='$(PG_URL)' $(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "$(FAULTS)" tests/processes $(PYTEST_ARGS)
	@if [ -z '$(RESTART_CLUSTER)' ]; then echo "== restart: skipped (set RESTART_CLUSTER) =="; else \
	  $(CLEAN_ENV) DURABLE_JOBS_RESTART_CLUSTER='$(RESTART_CLUSTER)' DATABASE_URL='$(RESTART_URL)' \
	    $(BIN)/python -m pytest -s -m "faults and postgres" tests/processes $(PYTEST_ARGS); fi

# Benchmark against the peers in shared/bench (PostgreSQL on 127.0.0.1:5432; see
# benchmarks/README.md). BENCH_ARGS=--quick for a one-minute smoke run without peers.
BENCH_ARGS ?=
.PHONY: bench
bench:
	$(CLEAN_ENV) .venv/py312-dj61/bin/python benchmarks/run.py $(BENCH_ARGS)

# SQLite, the embedded default, beside its file's commit floor (benchmarks/sqlite.py; a
# file in .tmp/bench): SQLITE_BENCH_ARGS="--rounds 1" for one round.
SQLITE_BENCH_ARGS ?=
.PHONY: bench-sqlite
bench-sqlite:
	$(CLEAN_ENV) .venv/py312-dj61/bin/python benchmarks/sqlite.py $(SQLITE_BENCH_ARGS)

# The example project (example_project/; docs/tutorial/example-project.md), in its
# own light virtualenv (Django, django-environ, psycopg): nothing to compile. Both targets
# use the SQLite file example.sqlite3, or the database DATABASE_URL names.
#   make demo               the onboarding flow end to end with a real worker, then exit 0
#   make run [SUPERUSER=1]  a worker and runserver together (SUPERUSER=1: admin / admin)
DEMO_PYTHON ?= python3
DEMO_VENV := .venv/demo
DEMO_MANAGE = env -u DJANGO_SETTINGS_MODULE $(DEMO_VENV)/bin/python manage.py
RUN_ADDR ?= 127.0.0.1:8000
SUPERUSER ?=
.PHONY: demo run
demo: $(DEMO_VENV)/.installed
	$(DEMO_MANAGE) migrate --noinput
	$(DEMO_MANAGE) demo

run: $(DEMO_VENV)/.installed
	$(DEMO_MANAGE) migrate --noinput
	$(if $(filter 1 yes true,$(SUPERUSER)),$(DEMO_MANAGE) demo_superuser)
	@echo "== worker + runserver: http://$(RUN_ADDR)/admin/ (Ctrl-C stops both) =="
	@trap 'kill $$worker 2>/dev/null || true; wait $$worker 2>/dev/null || true' EXIT; \
	$(DEMO_MANAGE) runjobs & worker=$$!; \
	$(DEMO_MANAGE) runserver $(RUN_ADDR)

$(DEMO_VENV)/.installed: pyproject.toml
	@echo "== demo / venv =="
	test -x $(DEMO_VENV)/bin/python || $(DEMO_PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install $(PIP_FLAGS) -e ".[example]"
	@$(DEMO_VENV)/bin/python -c 'import django, sys; print("demo: Python %s, Django %s" % (sys.version.split()[0], django.get_version()))'
	@touch $@
