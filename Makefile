# kafkalog — every target creates and uses .venv itself; nothing needs installing by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DEV    := $(VENV)/.dev-installed
SPARK  := $(VENV)/.spark-installed

.PHONY: librdkafka-suite demo test lint bench bench-serve bench-scale bench-tiered fault-loops check-java check-mvn check-node kafka-oracle interop-clients clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kafkalog needs Python >= 3.11; found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(DEV): pyproject.toml setup.py $(wildcard src/kafkalog/*/_*.c src/kafkalog/*/_*.h) | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

$(SPARK): pyproject.toml setup.py $(wildcard src/kafkalog/*/_*.c src/kafkalog/*/_*.h) | $(PY)
	$(PY) -m pip install --quiet -e '.[spark]'
	@touch $@

# Spark needs a JVM: say so plainly rather than failing deep inside PySpark.
check-java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: 'java' is not on PATH. Spark (and so the demo and the Spark tests) needs Java 17 or 21."; \
	  echo "       Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless"; \
	  echo "       macOS:         brew install openjdk@17"; \
	  exit 1; }

# The interop tests run Apache Kafka itself, fetched by Maven from Maven Central.
check-mvn:
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "error: 'mvn' is not on PATH. The real-Kafka interop tests fetch Apache Kafka with Maven."; \
	  echo "       Debian/Ubuntu: sudo apt-get install -y maven"; \
	  echo "       macOS:         brew install maven"; \
	  exit 1; }

# The KafkaJS scenario test runs Node.js; KafkaJS itself comes from npm into ~/.cache/kafkalog.
check-node:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "error: 'node' and 'npm' must be on PATH: the kafkalog serve tests run KafkaJS."; \
	  echo "       Debian/Ubuntu: sudo apt-get install -y nodejs npm"; \
	  echo "       macOS:         brew install node"; \
	  exit 1; }

# kcat (Debian's package, unpacked without root) and KafkaJS (npm), pinned in
# tests/interop_clients.py, into ~/.cache/kafkalog; a kcat already on PATH is used as it is.
interop-clients: $(DEV) check-node
	$(PY) tests/interop_clients.py

# Resolve each pinned Kafka version (interop/kafka-versions.txt) into Maven's local repository
# and remember its classpath under ~/.cache/kafkalog; nothing is downloaded into the repo.
kafka-oracle: $(DEV) check-java check-mvn
	$(PY) tests/kafka_oracle.py

demo: $(SPARK) check-java
	$(PY) -m kafkalog.demo

lint: $(DEV)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The whole suite in one run, every test on both record codecs: the compiled one (which must
# have been built) and the pure-Python reference it is checked against (tests/conftest.py).
# Both halves run the real-Kafka tests: the pure-Python codec must read Kafka's files too.
test: lint check-java kafka-oracle interop-clients
	KAFKALOG_REQUIRE_FAST=1 $(PY) -m pytest

bench: $(DEV) kafka-oracle
	$(PY) -m bench

# the serve suite alone, its rows replaced in BENCHMARKS.md (about 25 minutes: both servers
# warm, long runs, two rounds each)
bench-serve: $(DEV) kafka-oracle
	$(PY) -m bench serve --merge

# the scale suite alone beside Kafka 4.3.1 (1,000, 4,000 and 10,000 partitions, and 1,000 x 10
# segments), its rows replaced in BENCHMARKS.md (about 13 minutes)
# the tiered storage rows alone (about 4 minutes): remote reads beside local ones
bench-tiered: $(DEV)
	$(PY) -m bench tiered --merge

bench-scale: $(DEV) kafka-oracle
	$(PY) -m bench scale --merge

# librdkafka's own integration suite (built from Debian's source package into ~/.cache/kafkalog;
# the tests: interop/librdkafka-tests.txt) against kafkalog serve, about 23 minutes;
# `make librdkafka-suite AGAINST=kafka` runs the same list against Apache Kafka 4.3.1
librdkafka-suite: $(DEV) kafka-oracle
	$(PY) tests/librdkafka_suite.py --against $(or $(AGAINST),kafkalog)

# the long fault loops: 100 kill -9s of kafkalog serve under live transactional producers, and
# a kill -9 at every step of tiered storage's copies and deletions (about 100), and its S3 store
# unreachable for a minute under load
fault-loops: $(DEV)
	KAFKALOG_TXN_KILLS=100 $(PY) -m pytest -s tests/test_txn_kill_loop.py
	KAFKALOG_TIERED_KILLS=all $(PY) -m pytest tests/test_tiered_crash.py
	KAFKALOG_STORE_OUTAGE_S=60 $(PY) -m pytest tests/test_tiered_serve.py -k down_under_load

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build src/*.egg-info
