# The two commands of the README. Both set up .venv first (idempotent, pinned, no ROS needed).
.PHONY: setup demo test test-fast

setup:
	scripts/bootstrap.sh

demo: setup
	.venv/bin/gesim-ros shadow-run

test: setup
	scripts/run_tests.sh

test-fast: setup
	scripts/run_tests.sh -m "not slow"
