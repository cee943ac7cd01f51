# Two entry points (see README): `make report` and `make test`. Both install what they need.
PY ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
# ttnn wheels exist for CPython 3.10 / 3.12 only: its bit-exactness test runs in a venv of its own.
TTNN_VENV ?= .venv-ttnn
# The first interpreter that really runs as 3.12 / 3.10 (a pyenv shim for an inactive version exists but fails).
TTNN_BASE_PY ?= $(shell for p in python3.12 python3.10 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python \
	$${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.10*/bin/python; do \
	"$$p" -c "import sys; sys.exit(sys.version_info[:2] not in ((3, 12), (3, 10)))" >/dev/null 2>&1 \
	&& { echo "$$p"; break; }; done)
export TT_METAL_MOCK_CLUSTER_DESC_PATH ?= $(CURDIR)/device/mock/blackhole_p150.yaml

.PHONY: install report test test-core test-ttnn bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[oracle,dev]'
	touch $@

$(TTNN_VENV)/.installed: pyproject.toml
	@test -n "$(TTNN_BASE_PY)" || { echo "no CPython 3.12/3.10 found for ttnn (set TTNN_BASE_PY)"; exit 1; }
	$(TTNN_BASE_PY) -m venv $(TTNN_VENV)
	$(TTNN_VENV)/bin/python -m pip install -q --upgrade pip
	$(TTNN_VENV)/bin/python -m pip install -q -e '.[device,dev]'
	touch $@

install: $(VENV)/.installed

report: $(VENV)/.installed
	$(VPY) -m experiments.report

test: test-core test-ttnn

# Whole files per worker, in the order tests/conftest.py gives (longest first): module fixtures are
# built once, and no long file starts last (--no-loadscope-reorder: pytest-xdist >= 3.8). The workers
# share one fresh JAX compilation cache per run (tests/conftest.py).
test-core: $(VENV)/.installed
	$(VPY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

# quantize_bfp / round_bf16 bit for bit against ttnn's host converter (mock Blackhole, no chip needed).
test-ttnn: $(TTNN_VENV)/.installed
	TT_LOGGER_LEVEL=$${TT_LOGGER_LEVEL:-error} $(TTNN_VENV)/bin/python -m pytest -q tests/test_numerics_ttnn.py tests/test_device_ttnn.py

lint: $(VENV)/.installed
	$(VPY) -m ruff check jaxref costmodel device experiments tests

clean:
	rm -rf $(VENV) $(TTNN_VENV) *.egg-info .pytest_cache
