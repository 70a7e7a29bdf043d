# Every target creates what it needs: the virtual environment, the pinned packages and the CDK CLI.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk
# checkov pins boto3 and more to versions constraints.txt does not allow: it gets a virtual environment of its own.
CHECKOV_VENV := .venv-checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov
# The dashboard widget's browser test looks at the page in Debian's Chromium, driven by its chromedriver.
CHROMIUM := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver

export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_ACCOUNT_ID_ENDPOINT_MODE := disabled
export CDK_DISABLE_VERSION_CHECK := 1

.PHONY: help setup wheels demo test unit synth lint typecheck snapshots catalog lock clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt requirements-dev.txt constraints.txt layers/engine/requirements.txt engine/pyproject.toml cdk/pyproject.toml
	@echo "setup: creating $(VENV) and installing the pinned packages (aws-cdk-lib, jsii, moto, cfn-lint: a few minutes on a fresh machine)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# The engine and the constructs install editable (the operator CLI is .venv/bin/outbox); the example
	@# app's own packages (modules, stacks, tools) are used in place, from this directory.
	$(PY) -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.txt constraints-checkov.txt
	@echo "setup: creating $(CHECKOV_VENV) for checkov, whose pins fight the project's (about half a minute)"
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements-checkov.txt -c constraints-checkov.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	@echo "setup: installing the AWS CDK CLI into node_modules/ (npm ci)"
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed ## Create the virtual environment and install the CDK CLI

.PHONY: browser
browser: ## Install headless Chromium and its driver for the widget's browser test (Debian, as root: apt-get)
	@if [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; then \
		echo "browser: $(CHROMIUM) and $(CHROMEDRIVER) are installed"; \
	elif [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "browser: not installed, and this needs root and apt-get (apt-get install chromium chromium-driver):" \
			"the dashboard widget's browser test will skip"; \
	else \
		echo "browser: installing chromium and chromium-driver (apt-get, a minute or two)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
			>/dev/null; } || echo "browser: apt-get could not install it: the dashboard widget's browser test will skip"; \
	fi

.PHONY: checkov-env
checkov-env: $(CHECKOV_VENV)/.installed ## Create checkov's own virtual environment (make test runs checkov from it)

wheels: setup ## Build the two packages into dist/ (they are not on a public index yet): pip install --find-links dist/ ...
	rm -rf dist
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps -w dist ./engine ./cdk

demo: setup ## Run the whole pipeline locally on moto with a workload and injected failures (ARGS="--serve 4566")
	$(PY) -m tools.demo $(ARGS)

.PHONY: simulate
simulate: setup ## Deterministic fault-schedule simulation of the pipeline (SEEDS=150; one seed with its trace: SEED=n; SHRINK=n)
	$(PY) -m simulation $(if $(SHRINK),--shrink $(SHRINK),$(if $(SEED),--seed $(SEED),--seeds $(or $(SEEDS),150)))

.PHONY: soak
soak: setup ## Seeds from a random first seed, the failing ones grouped by kind (SEEDS=2000; ARGS="--first N --jobs N")
	$(PY) -m simulation --soak $(or $(SEEDS),2000) $(ARGS)

.PHONY: mutants
mutants: setup ## The simulator's power: each engine bug of simulation/mutants.py alone, over seeds 1..80 (SEEDS=n; ARGS="--only ID", "--check")
	$(PY) -m simulation.mutation --seeds $(or $(SEEDS),80) $(ARGS)

.PHONY: mutants-sample
mutants-sample: setup ## An unbiased mutation score: cosmic-ray's mutants of the guarantee code, a seeded sample (SAMPLE=200), killed by their tests then seeds 1..40 (ARGS="--resume", "--jobs 2", "--list")
	$(PY) -m simulation.mutants_sample --sample $(or $(SAMPLE),200) $(ARGS)

test: setup checkov-env browser ## Run the whole test suite (lint, types, unit, functional, infrastructure)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@# Named here, checkov must run: the infrastructure test fails instead of skipping if it is missing. So must the
	@# browser test, once the browser is installed (OUTBOX_BROWSER=required): a browser it cannot start is a failure.
	OUTBOX_CHECKOV=$(CHECKOV) \
		OUTBOX_BROWSER=$$([ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ] && echo required) $(PY) -m pytest

unit: setup ## Run only the fast tests (no synth)
	$(PY) -m pytest tests/unit

synth: setup ## Synthesize offline with cdk-nag, bundling the layer with pip (CONTEXT="-c commerceServices=fake -c alarmEmail=... -c operatorArns=...")
	$(CDK) synth --no-notices --quiet $(CONTEXT)

catalog: setup ## Regenerate catalog.json from the modules (the contract test checks it is current)
	$(PY) -m tools.catalog

snapshots: setup ## Rewrite the CDK template snapshots after an intended change
	$(PY) -m pytest tests/infrastructure --snapshot-update

lint: setup ## Format and lint the code in place
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

typecheck: setup ## Type-check the engine, handlers and stacks
	$(VENV)/bin/mypy

.PHONY: bench
bench: setup ## Benchmarks against Powertools Idempotency, cost per event; writes benchmarks/RESULTS.md (~5 min)
	$(PY) -m benchmarks $(ARGS)

lock: ## Regenerate constraints.txt from a fresh resolve of requirements-dev.txt
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements-dev.txt
	(echo "# Full pin set of every transitive dependency (regenerate with: make lock)."; .lock-venv/bin/pip freeze) > constraints.txt
	rm -rf .lock-venv

.PHONY: layer-lock
layer-lock: setup ## Rewrite layers/engine/requirements.lock (each layer pin with its wheel's sha256) after changing a pin
	$(PY) -m tools.layer_lock

.PHONY: lock-checkov
lock-checkov: ## Regenerate constraints-checkov.txt from a fresh resolve of requirements-checkov.txt
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements-checkov.txt
	(echo "# Full pin set of checkov's environment (regenerate with: make lock-checkov)."; .lock-venv/bin/pip freeze) > constraints-checkov.txt
	rm -rf .lock-venv

clean: ## Remove everything the targets created
	rm -rf $(VENV) $(CHECKOV_VENV) node_modules cdk.out dist .local .build .pytest_cache .mypy_cache .ruff_cache
