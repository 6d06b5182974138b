"""The sizes that decide how a model file is read and written, below every reader and writer (tests
lower them to simulate large models)."""

# Protobuf cannot serialize a message over 2 GiB; stay well below it.
EXTERNAL_DATA_THRESHOLD_BYTES = 1_800_000_000
# Files at least this large are parsed lazily: their weights stay memory-mapped (ir/wire.py).
LAZY_LOAD_THRESHOLD_BYTES = 8 * 1024 * 1024
