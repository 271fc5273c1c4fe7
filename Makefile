# Two commands: `make demo` (set up, then launch the bundled job) and `make test` (set up, then
# run every check CI runs). Both are idempotent; the venv is rebuilt when pyproject.toml changes.
VENV ?= .venv
# The CPU build: a plain `torch` requirement would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
TEST_TOOLS := sshd:openssh-server ssh:openssh-client ip:iproute2 tmux:tmux pdsh:pdsh dockerd:docker.io
# `ddptui completion zsh|fish` read by those shells (tests/unit/test_completion.py)
TEST_TOOLS += zsh:zsh fish:fish
# Containers on the test hosts (tests/support/containerhosts.py): podman with runc (crun fails
# on this kind of machine) and catatonit for `run --init`.
TEST_TOOLS += podman:podman runc:runc catatonit:catatonit
# `ddptui serve`'s browser test: Debian's Chromium and its chromedriver (Selenium downloads none).
TEST_TOOLS += chromium:chromium chromedriver:chromium-driver
# A real Slurm 22.05 for the jobs handed to Slurm (tests/support/slurmhosts.py); the packages'
# own daemons stay off (the tests start theirs in namespaces).
TEST_TOOLS += slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge
SLURM_UNITS := slurmctld slurmd munge

.PHONY: setup demo dashboard test lint docs test-tools clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[train,lightning,dev]'
	touch $@

demo: setup  ## the bundled job: two local nodes x two ranks, gloo on CPU
	$(BIN)/ddptui --headless launch -i inventory.yaml

dashboard: setup
	$(BIN)/ddptui -i inventory.yaml

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

docs: setup  ## the site (mkdocs.yml) into site/; --strict: a broken link or anchor fails
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test-tools:  ## the end-to-end tests build real sshd hosts: install what they need
	@missing=""; for t in $(TEST_TOOLS); do \
	  command -v $${t%%:*} >/dev/null || [ -x /usr/sbin/$${t%%:*} ] || missing="$$missing $${t#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  ! command -v systemctl >/dev/null || systemctl disable --now $(SLURM_UNITS) >/dev/null 2>&1 || true; \
	fi

test: setup test-tools lint docs
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
