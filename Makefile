# labkit: the two commands of README.md are `make demo` and `make test` (as root, Debian 12).
PY := .venv/bin/python
# `:=` (not `?=`, which is re-evaluated at each use): one id for the run and the line that names it
ifeq ($(origin CAMPAIGN), undefined)
CAMPAIGN := affinity-local-$(shell date +%Y%m%d-%H%M%S)
endif
DEMO_ARGS ?=

.PHONY: setup setup-tools setup-daemons setup-browser demo dashboard test unit integration notebooks bench lint clean-out reliability setup-openstack test-openstack docs docs-site

setup:
	bash scripts/setup-core.sh

# sysbench, apache2 + ab, stress-ng, fio, iperf3 on this host (the local backend's workloads)
setup-tools: setup
	bash scripts/setup-tools.sh

setup-daemons: setup-tools
	bash scripts/setup-containers.sh
	bash scripts/setup-libvirt.sh
	bash scripts/setup-ssh.sh
	bash scripts/setup-fleet.sh
	bash scripts/setup-slurm.sh

# Debian's chromium for the browser test of the notebooks (tests/notebooks/test_browser.py)
setup-browser: setup
	bash scripts/setup-browser.sh

# The flagship study (notebooks/01) on the local backend with its default parameters. It writes to its
# own campaign id and to out/ (figures in out/figures/demo/), never to the committed data/ or figures/.
demo: setup
	mkdir -p out
	$(PY) -m papermill --engine labkit notebooks/01_affinity_factorial.ipynb out/01_affinity_factorial.ipynb \
	    -p mode run -p backend local -p campaign_id $(CAMPAIGN) -p figures_dir out/figures/demo \
	    -p interactive False $(DEMO_ARGS)
	@echo "results: data/$(CAMPAIGN)/  figures: out/figures/demo/  executed notebook: out/01_affinity_factorial.ipynb"

# The explorer (notebooks/00_explorer.ipynb) as a read-only web app served by Voila on 127.0.0.1
# (prints the address with its token); DASHBOARD_ARGS="--port 8900" for another port.
DASHBOARD_ARGS ?=
dashboard: setup
	.venv/bin/labkit dashboard $(DASHBOARD_ARGS)

# The test sshd that scripts/setup-ssh.sh starts (127.0.0.1 only).
test integration bench test-openstack: export LABKIT_SSH_HOST ?= 127.0.0.1
test integration bench test-openstack: export LABKIT_SSH_PORT ?= 2222
test integration bench test-openstack: export LABKIT_SSH_USER ?= root
test integration bench test-openstack: export LABKIT_SSH_KEY ?= /root/.ssh/labkit_test_ed25519

# Everything: daemons, images, the single-node OpenStack, unit + integration + notebook tests
# (the `openstack` tests included: LABKIT_OPENSTACK=1).
# The fleet test hosts (network namespaces, their sshds, the bridge) are removed afterwards,
# whatever the outcome; the exit status is pytest's.
test: setup-daemons setup-browser setup-openstack
	$(PY) -m ruff check labkit tests benchmarks reliability
	$(PY) -m ruff format --check labkit tests benchmarks reliability
	.venv/bin/lint-imports
	$(PY) -m mypy
	$(MAKE) --no-print-directory docs-site
	status=0; LABKIT_OPENSTACK=1 $(PY) -m pytest -ra --durations=25 tests || status=$$?; bash scripts/setup-fleet.sh teardown; exit $$status

# The documentation site (mkdocs.yml, docs/index.md) into build/site/: the seed notebooks and the explorer
# executed in view mode on the committed data (docs/gen/notebooks.py, skipped when current), then
# `mkdocs build --strict`: a warning, a broken internal link or anchor fails it (external links not fetched).
docs: setup docs-site

docs-site:
	$(PY) docs/gen/notebooks.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

unit: setup
	$(PY) -m pytest -ra tests/unit

integration: setup-daemons
	status=0; $(PY) -m pytest -ra tests/integration || status=$$?; bash scripts/setup-fleet.sh teardown; exit $$status

# Notebook tests (papermill on small parameters; the browser test needs scripts/setup-browser.sh).
notebooks: setup-daemons setup-browser
	$(PY) -m pytest -ra tests/notebooks

lint: setup
	$(PY) -m ruff check labkit tests benchmarks reliability
	$(PY) -m ruff format --check labkit tests benchmarks reliability
	.venv/bin/lint-imports
	$(PY) -m mypy

# Every script runs even when one fails (e.g. its daemon is down); the failed ones are listed at the end.
bench: setup
	@failed=""; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "== failed:$$failed (\`make setup-daemons\` starts the daemons, \`make setup-openstack\` the cloud of bench_openstack.py)"; exit 1; fi

# A single-node OpenStack from Debian's packages (needs the ssh key and the VM image of setup-daemons)
# and only the `openstack` tests on it (`make test` runs them too; README: Clouds).
setup-openstack: setup-daemons
	bash scripts/setup-openstack.sh

test-openstack: setup-openstack
	LABKIT_REQUIRE=openstack $(PY) -m pytest -ra -m openstack tests/integration/test_openstack.py

clean-out:
	rm -rf out

# The reliability suite of issue 13 (not part of `make test`: several minutes): >= 100 SIGKILLs
# with resume, SIGTERM/SIGINT cases, 1,000 fuzzed inputs of each kind; prints a table.
# RELIABILITY_ARGS="--backend docker --skip fuzz" runs the kill loop on docker.
RELIABILITY_ARGS ?=
reliability: setup
	$(PY) reliability/run.py $(RELIABILITY_ARGS)
