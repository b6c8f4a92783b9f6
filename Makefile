# Two commands on a fresh Linux machine with Python 3.11:
#   make run    set up .venv and run the crawl configured in config.ini (embedded SQLite + Redis)
#   make test   set up .venv and run the whole test suite (needs Redis and MariaDB running)
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

# uv installs what pip would, from the same pins, in 12 s instead of 22 (every CI run makes a
# fresh .venv); pip stays in the venv for whoever wants it. --compile-bytecode as pip does: where
# PYTHONDONTWRITEBYTECODE is set (this machine), nothing else would ever write the .pyc files,
# and every process would compile Scrapy, Twisted and SQLAlchemy anew (a second of CPU each).
UV_VERSION ?= 0.13.9
$(BIN)/cnkispider: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[test,exe]'
	touch $@

.PHONY: setup compile run demo test test-fast lint bench exe exe-windows catalogue
setup: $(BIN)/cnkispider

run: setup
	$(BIN)/cnkispider run

demo: setup
	$(BIN)/cnkispider demo

# The tests mostly wait (on timers, subprocesses, the stand-in), so more workers than the CI
# machine's 2 cores pay; each pass prints its TEST_DURATIONS slowest tests. The tests that assert
# a wall-clock bound (marker `timing`) run afterwards, on a machine the suite is not loading, two
# at a time: they mostly wait (28 s of CPU in 156 s when run one by one), so each has a core of
# its own (one test at a time to each, the pace crawl first). Both passes together are the whole
# suite, and the second runs (and reports) even when the first failed; make test fails if either
# did. docs/TESTING.md: the tiers and markers.
TEST_WORKERS ?= 8
TIMING_WORKERS ?= 3
TEST_DURATIONS ?= 10
# The project's own .pyc files, compiled before the tests start their hundreds of worker processes
# (0.1 s of CPU off each one's start where PYTHONDONTWRITEBYTECODE keeps Python from writing them).
compile: setup
	$(BIN)/python -m compileall -q cnkispider tasks proxy errors standin tests bench

test: setup compile
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/pytest -n $(TEST_WORKERS) -m "not timing" --durations=$(TEST_DURATIONS); parallel=$$?; \
	$(BIN)/pytest -n $(TIMING_WORKERS) --maxschedchunk 1 -m timing --durations=$(TEST_DURATIONS) && exit $$parallel

# The fast tier (docs/TESTING.md): parsers, pure policies, unit tests and small stand-in crawls,
# under 2 minutes on 2 cores. It is every test not known to be slow: not marked `slow` or
# `timing` and using no slow fixture (tests/conftest.py); `--fast` fails a test of the tier that
# takes over 4 s of CPU (or 60 s), so a slow test cannot land in it unnoticed. A subset of `make test`.
test-fast: setup compile
	$(BIN)/pytest -n $(TEST_WORKERS) --fast --durations=$(TEST_DURATIONS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The operator's words (docs/TRANSLATING.md): every string marked with _() / ngettext / N_ in
# the Python and the templates (babel.cfg) extracted into build/cnkispider.pot, merged into each
# language's .po (new strings empty, none lost, none guessed), then compiled to the .mo files
# committed beside them (a clean clone and the .exe read those; nothing compiles at run time).
# Idempotent: run twice, the second changes nothing (the .pot, which carries the extraction's
# date, is not committed; no line numbers in the .po, so a merge conflicts only where a word did).
LOCALE := cnkispider/words/locale
catalogue: setup
	mkdir -p build
	$(BIN)/pybabel -q extract --no-location --sort-output -F babel.cfg -k N_ \
		--project cnkispider -o build/cnkispider.pot .
	for lang in zh_CN en; do \
		test -f $(LOCALE)/$$lang/LC_MESSAGES/cnkispider.po || \
			$(BIN)/pybabel -q init -D cnkispider -i build/cnkispider.pot -d $(LOCALE) -l $$lang; \
	done
	$(BIN)/pybabel -q update --no-fuzzy-matching --ignore-obsolete --ignore-pot-creation-date \
		-D cnkispider -i build/cnkispider.pot -d $(LOCALE)
	$(BIN)/pybabel compile --statistics -D cnkispider -d $(LOCALE)

exe: setup
	$(BIN)/pyinstaller --noconfirm --clean build_exe.spec

# dist/cnkispider.exe, built on this Linux machine: PyInstaller under Wine with the embeddable
# Windows CPython (scripts/build_exe_windows.sh installs Wine if missing; caches in ~/.cache)
exe-windows:
	bash scripts/build_exe_windows.sh
