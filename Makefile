# Two commands do all set-up on a fresh machine:
#   make demo   builds .venv/core-$(MEGATRON_CORE_VERSION), patches that core, runs the demo
#   make test   the test matrix: every core leg in tools/test_matrix.sh
MEGATRON_CORE_VERSION ?= 0.13.1
export MEGATRON_CORE_VERSION

.PHONY: demo test env status

env:
	tools/env.sh $(MEGATRON_CORE_VERSION)

demo:
	venv=$$(tools/env.sh $(MEGATRON_CORE_VERSION)) && $$venv/bin/megatron-overlay demo

status:
	venv=$$(tools/env.sh $(MEGATRON_CORE_VERSION)) && $$venv/bin/megatron-overlay status

test:
	tools/test_matrix.sh
