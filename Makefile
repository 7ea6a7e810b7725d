# servelab: the two commands are `make demo` and `make test`. Each sets itself up from nothing:
# a virtual environment in .venv, the Rust extension built by maturin (release), dependencies
# from PyPI and crates.io.
# Students (README.md of a release, assignments/README.md, each task's README) use three:
#   make build                 once: .venv with servelab
#   make check [TASK=a2]       the assignments' tests, then the points table (TASK: a task's id,
#                              or a prefix naming one task); .venv/bin/pytest assignments/ is the same
#   make notebooks             Jupyter and nbgrader; then .venv/bin/jupyter lab assignments/notebooks

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
OUT    ?= out
# A student release sets this to 1: there, failing assignments are expected (but collection
# errors are not); here, the reference solutions must score full marks.
ASSIGNMENTS_MAY_FAIL ?=
# Hypothesis profile for tests: "ci" (sized for a 2-core machine) unless told otherwise.
HYPOTHESIS_PROFILE ?= ci
export HYPOTHESIS_PROFILE

RUST_SOURCES := $(shell find rust -name '*.rs' 2>/dev/null) $(wildcard Cargo.toml)
STAMP_VENV   := $(VENV)/.deps-stamp
STAMP_BUILD  := $(VENV)/.build-stamp
STAMP_NOTEBOOKS := $(VENV)/.notebooks-stamp
STAMP_CLUSTER := $(VENV)/.cluster-stamp
STAMP_STAFF := $(VENV)/.staff-stamp
# One pip at a time in .venv (two terminals, parallel make): a lock that macOS has too (it has no
# flock(1)), Python's fcntl.flock on $(VENV)/.build-lock, held while the command runs.
LOCKED = $(PY) -c 'import fcntl, subprocess, sys; f = open(sys.argv[1], "w"); fcntl.flock(f, fcntl.LOCK_EX); sys.exit(subprocess.call(sys.argv[2:]))' $(VENV)/.build-lock

# The Python of .venv, so that no make build leaves a dead end: PYTAG is $(PYTHON)'s tag (cp312;
# empty when it does not run), VENV_TAG the tag of the Python that made .venv (empty when there is
# none, when it was left half made, or when its Python no longer runs). Such a .venv is made
# again, and so is one made by another Python than a PYTHON named on the command line (or in the
# environment); without a named PYTHON, a working .venv is kept whatever python3 is now. A named
# PYTHON that does not run stops the build at once, naming it, and leaves .venv as it is.
TAG_OF       = -c 'import sys; print("cp%d%d" % sys.version_info[:2])' 2>/dev/null
PYTAG       := $(shell $(PYTHON) $(TAG_OF))
VENV_TAG    := $(shell [ -f $(STAMP_VENV) ] && [ -x $(VENV)/bin/python ] && $(VENV)/bin/python $(TAG_OF))
NAMED_PYTHON := $(filter command line environment,$(origin PYTHON))
STALE_VENV  := $(if $(wildcard $(VENV)/bin),$(if $(VENV_TAG),$(if $(and $(NAMED_PYTHON),$(PYTAG),$(filter-out $(VENV_TAG),$(PYTAG))),made by $(VENV_TAG) not $(PYTAG)),left half made or made by a Python that no longer runs))
BUILD_TAG   := $(if $(and $(VENV_TAG),$(if $(NAMED_PYTHON),,keep),$(if $(STALE_VENV),,keep)),$(VENV_TAG),$(PYTAG))
BROKEN_NAMED_PYTHON := $(and $(NAMED_PYTHON),$(if $(PYTAG),,broken))

# A staff release carries the compiled library as wheels, one per Python version (the instructors'
# staff-wheels target makes them): there, make build installs the one for $(PYTHON), with no Rust.
ifneq ($(wildcard wheels/*.whl),)
WHEEL ?= $(or $(firstword $(wildcard wheels/servelab-*-$(BUILD_TAG)-*.whl)),no-wheel-for-this-python)
# a student needs pytest and Hypothesis, not the developers' mypy (a few seconds less to install)
WHEEL_EXTRAS ?= student
endif
WHEEL_EXTRAS ?= dev

.PHONY: demo test test-library check bench build venv clean test-rust test-python test-assignments stubtest fuzz \
	test-autograder test-autograder-rest test-autograder-artifacts selfcheck release release-check grade notebooks-deps notebooks \
	wheel sdist staff-wheels test-python-other drop-stale-core typecheck

demo: $(STAMP_BUILD)
	$(VENV)/bin/servelab demo all --out $(OUT)

# the autograder's own tests and self-check exist only in the instructors' copy, and so does the
# run on a second Python (a student needs one interpreter)
# Lanes side by side (CI has two cores): the library's steps one after another in one, the run on
# the second Python in another, the autograder's tests in two more (the packages' test, wheel
# builds and fresh venvs, beside the rest; see test-autograder). One after the other, one core
# stood idle most of the time: pytest uses one, and the self-check's workers wait on wall-clock
# limits; with the second Python inside the library's lane, that lane ran on alone for minutes
# after the others had ended. Each lane's output is printed whole when it ends; the time limits
# of gradings follow the load, so no verdict depends on the other lanes
# (autograder/grading/calibrate.py).
test: $(STAMP_BUILD) $(STAMP_CLUSTER)
	@$(MAKE) --no-print-directory -j4 --output-sync=target test-library \
	$(if $(wildcard autograder/tests),test-python-other test-autograder)

# (test-assignments is left out where the course's own grading test of the assignments exists:
# its first test runs the same `pytest assignments/` on the reference and demands the same full
# marks, and the self-check grades the reference with 100 examples a property; a release, which
# has no such test, runs it here)
LIBRARY_STEPS := test-rust test-python $(if $(wildcard tests/test_assignments_grading.py),,test-assignments) stubtest typecheck
test-library: $(STAMP_BUILD)
	@for step in $(LIBRARY_STEPS); do $(MAKE) --no-print-directory $$step || exit 1; done

# (MAKEFLAGS emptied: under make test's lanes it names a jobserver that cargo is not handed; the
# ci-test profile of Cargo.toml is release without link-time optimisation: a third less to build)
test-rust:
	MAKEFLAGS= cargo test --profile ci-test --quiet

# the `cluster` extra (Dask) is installed for the sweep-on-a-LocalCluster test, which then must run
test-python: $(STAMP_BUILD) $(STAMP_CLUSTER)
	SERVELAB_REQUIRE_CLUSTER=1 $(PY) -m pytest -q tests

# the reference solutions must score full marks (the points table prints at the end)
test-assignments: $(STAMP_BUILD)
	$(PY) -m pytest -q -p no:cacheprovider assignments; rc=$$?; \
		[ $$rc -eq 0 ] || { [ -n "$(ASSIGNMENTS_MAY_FAIL)" ] && [ $$rc -eq 1 ]; }

# the students' one way to run their tests: .venv's pytest (a pytest from elsewhere cannot import
# servelab), the fail-fast student profile, a time limit per test, the points table last; make
# check TASK=a1_ledger (or TASK=a1) runs one task, and an unknown TASK lists the tasks
# (servelab.harness.plugin). Failing tests are expected while one works (pytest's exit 1);
# anything worse fails.
check: $(STAMP_BUILD)
	HYPOTHESIS_PROFILE=student $(PY) -m pytest assignments $(if $(TASK),-m task_$(TASK)); rc=$$?; [ $$rc -le 1 ]

# the autograder (autograder/README.md): its tests include the self-check (reference full marks,
# release zero, mutants and hostile submissions), graded once per session, JOBS at a time
# (default: the cores; time limits scale with the load, so verdicts do not depend on JOBS).
# test_artifacts.py (make sdist wheel: a second Rust build; fresh Python 3.10 and 3.12 venvs)
# runs in a pytest of its own, beside the others under make -j.
JOBS ?=
ARTIFACT_TESTS := autograder/tests/test_artifacts.py autograder/tests/test_staff_wheel.py
test-autograder: test-autograder-rest test-autograder-artifacts
test-autograder-rest: $(STAMP_BUILD) $(STAMP_NOTEBOOKS)
	SELFCHECK_JOBS=$(JOBS) $(PY) -m pytest -q -p no:cacheprovider autograder/tests $(addprefix --ignore=,$(ARTIFACT_TESTS))
test-autograder-artifacts: $(STAMP_BUILD) $(STAMP_NOTEBOOKS) $(STAMP_STAFF)
	$(PY) -m pytest -q -p no:cacheprovider $(ARTIFACT_TESTS)

selfcheck: $(STAMP_BUILD) $(STAMP_NOTEBOOKS)
	$(PY) -m autograder selfcheck $(if $(JOBS),--jobs $(JOBS))

# `make release`: a staff binary (the library compiled: make staff-wheels first, its wheels in
# wheels/); `make release READABLE=1`: the readable library, for a course without grades
# (autograder/README.md, "Two kinds of release").
RELEASE ?= $(OUT)/release
READABLE ?=
release: $(STAMP_BUILD) $(STAMP_NOTEBOOKS) $(if $(READABLE),,staff-wheels)
	$(PY) -m autograder release $(RELEASE) --force $(if $(READABLE),--readable,--wheels $(STAFF_DIST))

# the acceptance check of a release, outside make test (a second Rust build from nothing):
# the release builds with its README's set-up and its own make test passes
release-check: release
	$(MAKE) -C $(RELEASE) test

# make grade SUBMISSION=path/to/repo-or.zip [RESULTS=out/results.json]
RESULTS ?= $(OUT)/results.json
grade: $(STAMP_BUILD) $(STAMP_NOTEBOOKS)
	$(PY) -m autograder grade $(SUBMISSION) --out $(RESULTS)

stubtest: $(STAMP_BUILD)
	$(PY) -m mypy.stubtest servelab._core

# mypy on python/servelab and autograder/ (pyproject.toml [tool.mypy]): the last step of make
# test's library lane (about 12 s from a cold cache, 2 s warm)
typecheck: $(STAMP_BUILD)
	$(PY) -m mypy

# SimPy is the `bench` extra of pyproject.toml (the simulator benchmark's peer); installed here
# on its own, without rebuilding the extension.
bench: $(STAMP_BUILD)
	$(PY) -m pip install --quiet "simpy>=4.1,<5"
	$(PY) -m benchmarks

# Long soak (outside CI): the block allocator's state machine, Rust vs the Python reference,
# under the `thorough` profile; prints how many operations ran. FUZZ_EXAMPLES=20000 for longer.
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP_BUILD)
	HYPOTHESIS_PROFILE=thorough $(PY) tests/test_blocks_state_machine.py $(FUZZ_EXAMPLES)

venv: $(STAMP_VENV)
build: $(STAMP_BUILD)

# ---- nbgrader notebooks (assignments/notebooks/; the grader's side is the autograder's) ------------
# nbgrader and Jupyter are the `notebooks` extra of pyproject.toml, installed on their own (no
# rebuild of the extension) by the targets that grade or release notebooks, and by `make
# notebooks` for students (then: .venv/bin/jupyter lab assignments/notebooks).
notebooks-deps: $(STAMP_NOTEBOOKS)
# nbgrader's pip package switches on its instructors' server extensions (formgrader, the course
# and assignment lists of a JupyterHub exchange): a student's Jupyter started in the notebooks'
# folder would greet them with "[E ...] nbgrader will not work correctly" (formgrader wants the
# course folder under the server's root). Students need only `validate_assignment` (its Validate
# button); the others are switched off in .venv, with their JupyterLab menus and the "Create
# Assignment" toolbar (`jupyter server extension enable` / `jupyter labextension enable` undo it).
NBGRADER_INSTRUCTOR_EXTENSIONS := formgrader assignment_list course_list
NBGRADER_INSTRUCTOR_PLUGINS := formgrader assignment-list course-list create-assignment
STAMP_JUPYTER := $(VENV)/.jupyter-student-stamp
notebooks: $(STAMP_JUPYTER)
	@echo "open the notebooks with: $(VENV)/bin/jupyter lab assignments/notebooks"
$(STAMP_JUPYTER): $(STAMP_NOTEBOOKS)
	@$(VENV)/bin/jupyter server extension disable --sys-prefix --log-level=ERROR \
		$(addprefix nbgrader.server_extensions.,$(NBGRADER_INSTRUCTOR_EXTENSIONS)) > /dev/null
	@$(VENV)/bin/jupyter labextension disable --level=sys_prefix \
		$(addprefix @jupyter/nbgrader:,$(NBGRADER_INSTRUCTOR_PLUGINS)) > /dev/null 2>&1
	@touch $@

$(STAMP_NOTEBOOKS): $(STAMP_BUILD) pyproject.toml
	$(PY) -c "from servelab.harness.manifest import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['notebooks']))" \
		> $(VENV)/notebooks-requirements.txt
	$(LOCKED) $(PY) -m pip install --quiet -r $(VENV)/notebooks-requirements.txt
	touch $@

# Dask's `distributed`: the `cluster` extra of pyproject.toml, installed like the notebooks' one
# the `staff` extra (Cython, setuptools, stubgen) in .venv: test_staff_wheel.py compiles the
# library for the running Python, as the staff-wheels target does for each one
$(STAMP_STAFF): $(STAMP_BUILD) pyproject.toml
	@$(PY) -c "from servelab.harness.manifest import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['staff']))" \
		> $(VENV)/staff-in-venv-requirements.txt
	@$(LOCKED) $(PY) -m pip install --quiet -r $(VENV)/staff-in-venv-requirements.txt
	@touch $@

$(STAMP_CLUSTER): $(STAMP_BUILD) pyproject.toml
	@echo "installing the cluster extra (Dask distributed) for the tests…"
	@$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['cluster']))" \
		> $(VENV)/cluster-requirements.txt
	@$(LOCKED) $(PY) -m pip install --quiet -r $(VENV)/cluster-requirements.txt
	@touch $@

# $(PYTHON) first: it runs, it is 3.10 or later, a staff release has a wheel for it
# (tools/python_for_wheels.py names the wheels and the Pythons here that fit them); only then is
# .venv made, from nothing. (installing a wheel needs neither maturin nor a newer pip than the
# venv's own)
CHECK_PYTHON = v=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>&1); \
	case "$$v" in \
	3.1[0-9]|3.[2-9][0-9]) ;; \
	[0-9].[0-9]|[0-9].[0-9][0-9]) echo "make build: $(PYTHON) is Python $$v; servelab needs 3.10 or later (make build PYTHON=python3.12, or a path)" >&2; exit 1;; \
	*) echo "make build: the Python '$(PYTHON)' does not run ($$(echo "$$v" | head -1)); name one that does: make build PYTHON=python3.12 (or a path)" >&2; exit 1;; \
	esac$(if $(wildcard wheels/*.whl),; $(PYTHON) tools/python_for_wheels.py wheels $(PYTHON) || exit 1)

$(STAMP_VENV): $(if $(STALE_VENV),stale-venv) $(if $(BROKEN_NAMED_PYTHON),python-does-not-run)
	@$(CHECK_PYTHON)
	@rm -rf $(VENV)
	@echo "setting up $(VENV) with $(PYTHON)$(if $(WHEEL),, (pip, maturin))…"
	@$(PYTHON) -m venv $(VENV)
	$(if $(WHEEL),,@$(PY) -m pip install --quiet --upgrade pip)
	$(if $(WHEEL),,@$(PY) -m pip install --quiet "maturin>=1.9,<2")
	@touch $@

ifeq ($(WHEEL),)
# maturin develop installs servelab (editable: its sources are used in place) with the freshly
# built extension, and the runtime and `dev` dependencies that pyproject.toml lists.
# LOCKED: two builds at once (two terminals, parallel make) must not interleave pip installs.
# One line while it works; the full log (cargo, pip) in .venv/build.log, printed only on failure.
$(STAMP_BUILD): $(STAMP_VENV) $(RUST_SOURCES) pyproject.toml $(shell find python -name '*.pyi' 2>/dev/null)
	@echo "building the Rust core (about 2 min the first time; log in $(VENV)/build.log)…"
	@$(LOCKED) env VIRTUAL_ENV=$(abspath $(VENV)) PIP_QUIET=1 \
		$(VENV)/bin/maturin develop --release --extras dev --quiet > $(VENV)/build.log 2>&1 \
		|| { cat $(VENV)/build.log; echo "the build failed (log above, kept in $(VENV)/build.log)"; exit 1; }
	@touch $@
else
# `make build WHEEL=path/to/servelab-*.whl` (the wheel target writes one where the sources are; a
# staff release picks its own from its wheels folder): no Rust toolchain, no compilation; pip installs the wheel with the `dev`
# dependencies (a staff release: the `student` ones), in seconds.
$(STAMP_BUILD): $(STAMP_VENV) $(WHEEL)
	@echo "installing servelab from $(WHEEL)…"
	@$(LOCKED) $(PY) -m pip install --quiet --force-reinstall --no-deps "$(abspath $(WHEEL))"
	@$(LOCKED) $(PY) -m pip install --quiet "$(abspath $(WHEEL))[$(WHEEL_EXTRAS)]"
	@touch $@
endif

# (reached when the Python to build for has no wheel: a kept .venv's, whose wheels changed under
# it, or a named PYTHON that does not run)
no-wheel-for-this-python: $(if $(BROKEN_NAMED_PYTHON),python-does-not-run)
	@$(VENV)/bin/python tools/python_for_wheels.py wheels $(VENV)/bin/python; exit 1

.PHONY: stale-venv python-does-not-run no-wheel-for-this-python
stale-venv:
	@$(CHECK_PYTHON)
	@echo "$(VENV) was $(STALE_VENV): it is made again with $(PYTHON)"
python-does-not-run:
	@$(CHECK_PYTHON)

# The extension is built for the stable ABI (abi3: one file for Python 3.10 and later). A
# version-specific one left by an older build would shadow it (Python tries
# .cpython-3XX-*.so before .abi3.so), so it goes before each build.
$(STAMP_BUILD): | drop-stale-core
drop-stale-core:
	@rm -f python/servelab/_core.cpython-*.so

# ---- packaging (README "Install"): wheels, sdist, a second Python ------------------------------
# `make wheel`: abi3 wheels (one per platform for every Python >= 3.10) in $(DIST)/, linked by
# zig (ziglang, from PyPI) against glibc 2.17, so that they are manylinux2014 although this
# machine's glibc is newer. `make wheel WHEEL_FLAGS=` builds for this machine's glibc instead.
# Neither the wheel nor the sdist holds the references (the solutions), the assignments or the
# autograder: pyproject.toml's [tool.maturin] exclude and Cargo.toml's include say what goes in,
# and the autograder's artifact tests list both archives.
DIST        ?= dist
WHEEL_FLAGS ?= --zig --compatibility manylinux2014
ZIGLANG     := ziglang>=0.13,<0.18
# (built again only when what goes into it changed: the Rust sources, the package's files,
# pyproject.toml; the stamp in $(DIST)/ says when it was last built, so that the staff wheels
# made from it are reused too)
WHEEL_STAMP  := $(DIST)/.abi3-wheel-stamp
WHEEL_INPUTS := $(RUST_SOURCES) pyproject.toml $(shell find python -type f ! -name '*.so' ! -name '*.pyc' 2>/dev/null)
wheel: $(WHEEL_STAMP)
$(WHEEL_STAMP): $(WHEEL_INPUTS) | $(STAMP_VENV)
	$(if $(findstring --zig,$(WHEEL_FLAGS)),$(PY) -m pip install --quiet "$(ZIGLANG)")
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/maturin build --release $(WHEEL_FLAGS) --out $(DIST)
	@touch $@

sdist: $(STAMP_VENV)
	$(VENV)/bin/maturin sdist --out $(DIST)

# `make staff-wheels`: the staff binary of a student release, one wheel per Python in
# $(STAFF_PYTHONS) (pyenv's 3.10-3.13, the instructors' default: a release carries all four),
# into $(STAFF_DIST)/: `make wheel`'s abi3 wheel with the library compiled by Cython, stubs
# beside it, and no servelab.reference or lecture_key (autograder/release/staff_wheel.py). Each
# Python gets a build venv with the `staff` extra (Cython, setuptools, mypy's stubgen) in
# $(VENV)/staff-<version>. The Pythons' builds run side by side, and a wheel whose inputs have not
# changed is reused (autograder/release/staff_wheels.py). About 3 min of CPU a Python at -O2
# (the newest abi3 wheel of $(DIST)/ is the base). From a fresh clone it builds what it needs
# first: .venv with servelab (the extra's list is read from pyproject.toml by it), the abi3 wheel.
STAFF_DIST    ?= $(DIST)/staff
STAFF_PYTHONS ?= $(foreach v,3.10 3.11 3.12 3.13,$(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(v).*/bin/python$(v)))))
STAFF_EXTRA   := $(VENV)/staff-requirements.txt
staff-wheels: $(STAMP_BUILD) wheel
	@test -n "$(strip $(STAFF_PYTHONS))" || { echo "no Python 3.10-3.13 under $(PYENV_ROOT)/versions: set STAFF_PYTHONS" >&2; exit 1; }
	@$(PY) -c "from servelab.harness.manifest import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['staff']))" > $(STAFF_EXTRA)
	$(PY) -m autograder.release.staff_wheels --base "$$(ls -t $(DIST)/servelab-*-abi3-*.whl | head -1)" \
		--out $(STAFF_DIST) --venvs $(VENV) --requirements $(STAFF_EXTRA) $(STAFF_PYTHONS)
	@ls -l $(STAFF_DIST)

# A second interpreter (the oldest supported, Python 3.10, from pyenv or PATH; PYTHON_OTHER=...
# picks another) runs the assignments' and the library's tests. Its venv imports servelab from
# python/ through a .pth file, with the abi3 extension that `make build` compiled: no second
# Rust build, and the instructors' references stay importable. (tests/test_assignments_grading.py,
# which grades the assignments through pytest, runs once, on the first Python, and so does
# test_benchmarks_smoke.py: the benchmarks are `make bench`'s, a developer's tool on the first
# Python, not a student's.) The library's other tests and the assignments all run, under the
# `compat` Hypothesis profile (10 examples a property instead of ci's 60: a difference between
# Pythons fails on any input; the ci run explores the inputs). Its venv holds what a student's
# does (the runtime and `student` dependencies): no mypy, which runs on the first Python.
PYENV_ROOT   ?= $(HOME)/.pyenv
PYTHON_OTHER ?= $(firstword $(wildcard $(PYENV_ROOT)/versions/3.10.*/bin/python3.10) $(shell command -v python3.10))
VENV_OTHER   := $(VENV)/other-python
PY_OTHER     := $(VENV_OTHER)/bin/python
STAMP_OTHER  := $(VENV_OTHER)/.deps-stamp
test-python-other: $(STAMP_BUILD) $(STAMP_OTHER)
	$(PY_OTHER) -c "import sys, servelab._core as c; print('second Python:', sys.version.split()[0], c.__file__)"
	HYPOTHESIS_PROFILE=compat $(PY_OTHER) -m pytest -q -p no:cacheprovider assignments
	HYPOTHESIS_PROFILE=compat $(PY_OTHER) -m pytest -q -p no:cacheprovider tests --ignore=tests/test_assignments_grading.py \
		--ignore=tests/test_benchmarks_smoke.py

$(STAMP_OTHER): $(STAMP_BUILD) pyproject.toml
	@test -n "$(PYTHON_OTHER)" || { echo "no second Python found: install 3.10 (pyenv install 3.10) or set PYTHON_OTHER=/path/to/python3.X" >&2; exit 1; }
	rm -rf $(VENV_OTHER)
	$(PYTHON_OTHER) -m venv $(VENV_OTHER)
	$(PY) -c "from servelab.harness.manifest import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['student']))" \
		> $(VENV_OTHER)/requirements.txt
	$(PY_OTHER) -m pip install --quiet -r $(VENV_OTHER)/requirements.txt
	$(PY_OTHER) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" | xargs -I{} sh -c 'echo "$(abspath python)" > {}/servelab-source.pth'
	touch $@

clean:
	rm -rf $(VENV) target $(OUT) .pytest_cache .hypothesis $(DIST)
