# The README's two commands: `make demo` and `make test`. Both install what they need.
SHELL := /bin/bash
APT_PACKAGES := qemu-utils qemu-system-x86 qemu-block-extra nbdkit \
	libnbd-bin libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-system \
	libvirt-clients libnss-wrapper libvirt-dev pkg-config gcc bubblewrap xfsprogs curl util-linux \
	libseccomp2 kubectl syslinux syslinux-common mtools dosfstools fdisk ovmf \
	mmdebstrap debian-archive-keyring e2fsprogs xorriso openssh-client \
	qemu-guest-agent docker-registry apache2-utils skopeo
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
PYTEST_ARGS ?=
# pytest-xdist workers (docs/testing.md: what a test must do to run beside others): two,
# one for the modules that boot guests under TCG, one for the rest; PYTEST_WORKERS=0 runs
# the suite in this process, one test at a time.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

.PHONY: setup apt test lint pytest demo bench clean

setup: apt $(STAMP)

# Debian packages, only those missing, without recommends (they pull in GUI bits).
apt:
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

pytest: setup
	$(VENV)/bin/pytest $(PYTEST_PARALLEL) --durations=10 $(PYTEST_ARGS)

test: lint pytest

demo: setup
	$(PY) -m rootdisk.demo $(if $(STOP),--stop)

bench: setup
	@for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
